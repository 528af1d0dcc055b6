import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// PROTOCOL.md's notes, "Database errors": each SQLSTATE class a request can meet has one
/// answer on every route (``APIError/database(_:)``): what a retry can fix is `503
/// unavailable`, an error of the request's own data is a final 4xx, the rest `500
/// internal`. One error of each class over real HTTP against a real PostgreSQL, caused
/// for real where that is cheap (a timeout, a lock, a deadlock, a deferred constraint, a
/// revoked grant, a killed backend) and raised by an operator's trigger where it is not
/// (a full disk).
@Suite(.hangLimit, .tags(.database), .tagSelection) struct DatabaseErrorTests {
    static let tables = """
        create table public.items (user_id uuid not null, id text not null, title text, primary key (user_id, id));
        select ferry.register_table('items', 'lww');
        create table public.games (user_id uuid not null, slot text not null, primary key (user_id, slot));
        select ferry.register_table('games', 'device_lock');
        """

    func withItems(
        arguments: [String] = [], _ body: (AccountsGateway, TestSession) async throws -> Void
    ) async throws {
        try await withAccountsGateway(arguments: arguments) { server in
            try await server.database.admin.execute(Self.tables)
            try await body(server, try await server.signUpAnonymous())
        }
    }

    func upsert(_ id: Int, _ key: String, title: String) -> [String: Any] {
        ["id": id, "table": "items", "op": "upsert", "row": ["id": key, "title": title]]
    }

    func expectUnavailable(_ response: APIResponse, _ comment: Comment? = nil) {
        #expect(response.status == 503 && response.code == "unavailable", "\(comment ?? "") \(response)")
        #expect(response.retryable == true)
    }

    func nothingWasPushed(_ server: AccountsGateway) async throws -> Bool {
        try await server.database.value(
            "select (select count(*) from public.items) + (select coalesce(sum(last_mutation_id), 0) from ferry.devices)"
        ) == "0"
    }

    /// Runs `body` with a gateway started after `setting` became the database's default for
    /// every connection the gateway opens (the admin's is open already).
    func withItems(
        databaseSetting setting: String, _ body: (AccountsGateway) async throws -> Void
    ) async throws {
        try await AccountsDatabase.with { database in
            try await database.admin.execute(Self.tables)
            try await database.admin.execute("alter database \(database.database.name) set \(setting)")
            try await withStartedGateway(databaseURL: database.gatewayURL) { gateway, port in
                try await body(AccountsGateway(database: database, gateway: gateway, port: port))
            }
        }
    }

    // MARK: - 08: connection exception

    /// PostgreSQL's own 08001, raised where an operator's trigger reaches another server
    /// (dblink) that does not answer: the class itself, not a connection the gateway lost.
    @Test func aConnectionExceptionTheDatabaseRaisesIsUnavailable() async throws {
        try await withItems { server, device in
            try await withClosedPort { closedPort in
                try await server.database.admin.execute(
                    """
                    create extension dblink;
                    create function public.reach_archive() returns trigger language plpgsql security definer as $$
                    begin perform public.dblink_connect('host=127.0.0.1 port=\(closedPort) connect_timeout=5'); return new; end $$;
                    create trigger reach_archive before insert on public.items for each row execute function public.reach_archive();
                    """)
                // What the push meets, asked directly: PostgreSQL's 08001.
                do {
                    try await server.database.admin.execute(
                        "insert into public.items values (gen_random_uuid(), 'x', 'x')")
                    Issue.record("the trigger reached a closed port")
                } catch let error as PostgresError {
                    #expect(error.sqlState == "08001", "\(error)")
                }
                let pushed = try await server.pushBatch(device, [upsert(1, "a", title: "t")])
                expectUnavailable(pushed.response)
                #expect(try await nothingWasPushed(server))
            }
        }
    }

    // MARK: - 57: operator intervention

    @Test func aStatementTimeoutIsUnavailable() async throws {
        try await withItems(arguments: ["--statement-timeout-ms", "2000"]) { server, device in
            try await server.database.admin.execute(
                """
                create function public.slow() returns trigger language plpgsql as $$
                begin perform pg_sleep(30); return new; end $$;
                create trigger slow before insert on public.items for each row when (new.title = 'slow')
                    execute function public.slow();
                """)
            let slow = try await server.pushBatch(
                device, [upsert(1, "a", title: "fast"), upsert(2, "b", title: "slow")])
            expectUnavailable(slow.response)
            #expect(try await nothingWasPushed(server))
            let retried = try await server.pushBatch(device, [upsert(1, "a", title: "fast")])
            #expect(retried.outcomes == ["applied"], "\(retried.response)")
        }
    }

    /// The gateway's own statements (here a sign-up, no caller) set the timeout per
    /// transaction too, as a caller's identity statement does: no start-up option carries it.
    @Test func aStatementTimeoutCutsTheGatewaysOwnStatements() async throws {
        try await withItems(arguments: ["--statement-timeout-ms", "500"]) { server, _ in
            try await server.database.admin.execute(
                """
                create function public.slow_sign_up() returns trigger language plpgsql as $$
                begin perform pg_sleep(30); return new; end $$;
                create trigger slow_sign_up before insert on ferry.users for each row
                    execute function public.slow_sign_up();
                """)
            let signUp = try await server.call(
                "POST", "/v1/auth/anonymous", json: ["device_id": UUID().uuidString.lowercased()])
            expectUnavailable(signUp)
            #expect(try await server.database.sleepingBackends() == 0, "cut by the server, not the client's deadline")
        }
    }

    @Test func aBackendKilledMidClaimIsUnavailable() async throws {
        try await withItems { server, device in
            let locker = try await server.database.database.connect()
            try await locker.execute("begin; lock table public.games in share mode")
            async let claim = server.call("POST", "/v1/locks/games/current/claim", token: device.accessToken)
            let waiting = try await server.database.gatewayBackendWaitingOnALock(running: "ferry.claim_lock")
            let pid = try #require(waiting, "the claim never waited on the locked table")
            #expect(try await server.database.value("select pg_terminate_backend($1::int)", [pid]) == "t")
            expectUnavailable(try await claim)
            try await locker.execute("rollback")
            await locker.close()
            let again = try await server.call("POST", "/v1/locks/games/current/claim", token: device.accessToken)
            #expect(again.status == 200, "\(again)")
        }
    }

    // MARK: - 55P03: lock not available

    @Test func aLockTimeoutIsUnavailableOnEveryRoute() async throws {
        try await AccountsDatabase.with { database in
            try await database.admin.execute(Self.tables)
            // Every gateway connection gets it (they open after this), the admin's not.
            try await database.admin.execute("alter database \(database.database.name) set lock_timeout = '300ms'")
            try await withStartedGateway(databaseURL: database.gatewayURL) { gateway, port in
                let server = AccountsGateway(database: database, gateway: gateway, port: port)
                let device = try await server.signUpAnonymous()
                let locker = try await database.database.connect()
                try await locker.execute(
                    """
                    begin;
                    lock table public.items in access exclusive mode;
                    lock table public.games in share mode;
                    lock table ferry.users in share mode
                    """)
                expectUnavailable(try await server.pushBatch(device, [upsert(1, "a", title: "t")]).response, "push")
                expectUnavailable(try await server.call("GET", "/v1/pull", token: device.accessToken), "pull")
                expectUnavailable(
                    try await server.call("POST", "/v1/locks/games/current/claim", token: device.accessToken), "claim")
                expectUnavailable(
                    try await server.call("POST", "/v1/auth/anonymous", json: ["device_id": UUID().uuidString]),
                    "sign-up")
                try await locker.execute("rollback")
                await locker.close()
                #expect(try await nothingWasPushed(server))
                #expect(try await database.value("select count(*) from ferry.users") == "1")
            }
        }
    }

    // MARK: - 40: transaction rollback

    /// A push that deadlocks is run once more by the gateway (RunningQueries.swift): the
    /// other transaction goes on, and the client is answered as if nothing happened.
    @Test func aDeadlockedPushIsRunOnceMoreAndApplies() async throws {
        try await withItems { server, device in
            let other = try await deadlockWithAPush(server, device)
            // The push was rolled back, so the other transaction has b; its second run
            // waits for it.
            try await other.execute("rollback")
            await other.close()
            let answer = try await other.pushed
            #expect(answer.response.status == 200, "\(answer.response)")
            #expect(answer.outcomes == ["applied", "applied", "applied"], "\(answer.response)")
            #expect(answer.lastMutationID == 6)
            #expect(
                try await server.database.rows("select id, title from public.items order by id") == [
                    ["a", "a1"], ["b", "b1"], ["c", "c1"],
                ])
        }
    }

    /// Run once more, a push that deadlocks again is answered 503 and applies nothing.
    @Test func aPushThatDeadlocksTwiceIsUnavailableAndAppliesNothing() async throws {
        try await withItems { server, device in
            let other = try await deadlockWithAPush(server, device)
            // The second run holds c and waits for b: wanting c deadlocks it again.
            let waiting = try await server.database.gatewayBackendWaitingOnALock(running: "ferry.push")
            try #require(waiting != nil, "the push was not run once more")
            try await other.execute("update public.items set title = 'other' where id = 'c'")
            expectUnavailable(try await other.pushed.response)
            try await other.execute("rollback")
            await other.close()
            #expect(
                try await server.database.rows("select id, title from public.items order by id") == [
                    ["a", "a0"], ["b", "b0"], ["c", "c0"],
                ])
            let retried = try await server.pushBatch(device, Self.deadlockingBatch)
            #expect(retried.outcomes == ["applied", "applied", "applied"], "\(retried.response)")
        }
    }

    /// Writes c, b then a, in that order (one statement).
    static var deadlockingBatch: [[String: Any]] {
        [
            ["id": 4, "table": "items", "op": "upsert", "row": ["id": "c", "title": "c1"]],
            ["id": 5, "table": "items", "op": "upsert", "row": ["id": "b", "title": "b1"]],
            ["id": 6, "table": "items", "op": "upsert", "row": ["id": "a", "title": "a1"]],
        ]
    }

    /// Another transaction and a push of ``deadlockingBatch`` in flight, deadlocked once:
    /// the other holds a; the push holds c and b and waits on a; the other then wants b,
    /// and waits long enough that the push's backend finds the deadlock and is rolled
    /// back. Returns with the other transaction holding a and b.
    func deadlockWithAPush(_ server: AccountsGateway, _ device: TestSession) async throws -> DeadlockedPush {
        let seeded = try await server.pushBatch(
            device, [upsert(1, "a", title: "a0"), upsert(2, "b", title: "b0"), upsert(3, "c", title: "c0")])
        try #require(seeded.outcomes == ["applied", "applied", "applied"], "\(seeded.response)")
        let connection = try await server.database.database.connect()
        try await connection.execute(
            "set deadlock_timeout = '60s'; begin; update public.items set title = 'other' where id = 'a'")
        let pushed = Task { try await server.pushBatch(device, Self.deadlockingBatch) }
        let waiting = try await server.database.gatewayBackendWaitingOnALock(running: "ferry.push")
        try #require(waiting != nil, "the push never waited on row a")
        try await connection.execute("update public.items set title = 'other' where id = 'b'")
        return DeadlockedPush(connection: connection, push: pushed)
    }

    struct DeadlockedPush {
        let connection: PostgresClient
        let push: Task<PushResponse, any Error>
        var pushed: PushResponse { get async throws { try await push.value } }
        func execute(_ sql: String) async throws { try await connection.execute(sql) }
        func close() async { await connection.close() }
    }

    /// A real 40001: the push (repeatable read, the database's default here) waits on a
    /// row another transaction updates, which then commits.
    @Test func aSerializationFailureIsUnavailableAndAppliesNothing() async throws {
        try await withItems(databaseSetting: "default_transaction_isolation = 'repeatable read'") { server in
            let device = try await server.signUpAnonymous()
            let seeded = try await server.pushBatch(device, [upsert(1, "a", title: "a0")])
            try #require(seeded.outcomes == ["applied"], "\(seeded.response)")
            let other = try await server.database.database.connect()
            try await other.execute("begin; update public.items set title = 'other' where id = 'a'")
            async let pushed = server.pushBatch(device, [upsert(2, "b", title: "b1"), upsert(3, "a", title: "a1")])
            let waiting = try await server.database.gatewayBackendWaitingOnALock(running: "ferry.push")
            try #require(waiting != nil, "the push never waited on row a")
            try await other.execute("commit")
            await other.close()
            expectUnavailable(try await pushed.response)
            #expect(
                try await server.database.rows("select id, title from public.items order by id") == [["a", "other"]])
            let retried = try await server.pushBatch(
                device, [upsert(2, "b", title: "b1"), upsert(3, "a", title: "a1")])
            #expect(retried.outcomes == ["applied", "applied"], "\(retried.response)")
        }
    }

    /// 40002 at commit: a deferred constraint trigger (an operator's integrity rule) that
    /// fails when the push commits is the request's own data, a final 409.
    @Test func aTransactionIntegrityViolationAtCommitIsAFinalConflict() async throws {
        try await withItems { server, device in
            try await server.database.admin.execute(
                """
                create function public.titles_differ() returns trigger language plpgsql as $$
                begin
                    if (select count(distinct title) <> count(*) from public.items where user_id = new.user_id) then
                        raise exception 'two items share a title' using errcode = 'transaction_integrity_constraint_violation';
                    end if;
                    return null;
                end $$;
                create constraint trigger titles_differ after insert or update on public.items
                    deferrable initially deferred for each row execute function public.titles_differ();
                """)
            let twins = try await server.pushBatch(
                device, [upsert(1, "a", title: "same"), upsert(2, "b", title: "same")])
            #expect(twins.response.status == 409 && twins.response.code == "conflict", "\(twins.response)")
            #expect(twins.response.retryable == false)
            #expect(twins.response.string("error", "message")?.contains("two items share a title") == true)
            #expect(try await nothingWasPushed(server))
            let distinct = try await server.pushBatch(
                device, [upsert(1, "a", title: "one"), upsert(2, "b", title: "two")])
            #expect(distinct.outcomes == ["applied", "applied"], "\(distinct.response)")
        }
    }

    // MARK: - 25006: read-only transaction

    /// A database that only reads (a standby during a failover): a sign-up's insert is
    /// refused 25006 by PostgreSQL, which a retry elsewhere can fix.
    @Test func aReadOnlyTransactionIsUnavailable() async throws {
        try await withItems(databaseSetting: "default_transaction_read_only = on") { server in
            let signUp = try await server.call("POST", "/v1/auth/anonymous", json: ["device_id": UUID().uuidString])
            expectUnavailable(signUp)
            #expect(try await server.database.value("select count(*) from ferry.users") == "0")
        }
    }

    // MARK: - 53: insufficient resources

    @Test func exhaustedResourcesAreUnavailable() async throws {
        try await withItems { server, device in
            try await server.database.admin.execute(
                """
                create function public.full_disk() returns trigger language plpgsql as $$
                begin raise exception 'could not extend file' using errcode = 'disk_full'; end $$;
                create trigger full_disk before insert on public.items for each row execute function public.full_disk();
                """)
            expectUnavailable(try await server.pushBatch(device, [upsert(1, "a", title: "t")]).response)
            #expect(try await nothingWasPushed(server))
        }
    }

    // MARK: - 22, 23: the request's data, found at commit

    @Test func aDeferredConstraintViolatedAtCommitIsAFinalConflict() async throws {
        try await withItems { server, device in
            try await server.database.admin.execute(
                """
                create table public.tree (
                    user_id uuid not null, id text not null, parent_id text,
                    primary key (user_id, id),
                    foreign key (user_id, parent_id) references public.tree (user_id, id) deferrable initially deferred);
                select ferry.register_table('tree', 'lww');
                """)
            func node(_ id: Int, _ key: String, parent: String) -> [String: Any] {
                ["id": id, "table": "tree", "op": "upsert", "row": ["id": key, "parent_id": parent]]
            }
            let orphan = try await server.pushBatch(device, [node(1, "child", parent: "missing")])
            #expect(orphan.response.status == 409 && orphan.response.code == "conflict", "\(orphan.response)")
            #expect(orphan.response.retryable == false)
            #expect(orphan.response.string("error", "message")?.contains("foreign key") == true)
            #expect(try await server.database.value("select count(*) from public.tree") == "0")
            // The constraint is checked at commit, so a child may come before its parent.
            let family = try await server.pushBatch(
                device,
                [node(1, "child", parent: "root"), ["id": 2, "table": "tree", "op": "upsert", "row": ["id": "root"]]])
            #expect(family.outcomes == ["applied", "applied"], "\(family.response)")
        }
    }

    @Test func aDataExceptionAtCommitIsAFinalInvalidRequest() async throws {
        try await withItems { server, device in
            try await server.database.admin.execute(
                """
                create function public.check_at_commit() returns trigger language plpgsql as $$
                begin perform 1 / (length(new.title) - 6); return null; end $$;
                create constraint trigger check_at_commit after insert on public.items
                    deferrable initially deferred for each row execute function public.check_at_commit();
                """)
            let answer = try await server.pushBatch(device, [upsert(1, "a", title: "divide")])
            #expect(answer.response.status == 400 && answer.response.code == "invalid_request", "\(answer.response)")
            #expect(answer.response.string("error", "message")?.contains("division by zero") == true)
            #expect(try await nothingWasPushed(server))
        }
    }

    /// 54000 outside a push: a lock key too large for the lock table's primary-key index
    /// (random hex, which does not compress under the btree's 2,704-byte entry limit).
    @Test func aProgramLimitOutsideAPushIsAFinalInvalidRequest() async throws {
        try await withItems { server, device in
            let key = (0..<200).map { _ in String(format: "%016llx", UInt64.random(in: 0...UInt64.max)) }.joined()
            let claim = try await server.call("POST", "/v1/locks/games/\(key)/claim", token: device.accessToken)
            #expect(claim.status == 400 && claim.code == "invalid_request", "\(claim)")
            #expect(claim.retryable == false)
            #expect(claim.string("error", "message")?.contains("index row size") == true, "\(claim)")
            #expect(try await server.database.value("select count(*) from public.games") == "0")
        }
    }

    // MARK: - Text the database cannot be sent

    /// A JSON `\u0000` decodes to a NUL in the string the gateway passes on as a text
    /// parameter, which libpq would cut at the NUL: sign-in's email was looked up as
    /// `x@example.com` and the right password signed the caller in.
    @Test func aNULInATextParameterIsAFinalInvalidRequestAndChangesNothing() async throws {
        try await withAccountsGateway { server in
            _ = try await server.emailAccount("x@example.com", password: "the right password")
            let sessions = try await server.database.value("select count(*) from ferry.sessions")
            let answer = try await server.signIn(email: "x@example.com\u{0}junk", password: "the right password")
            #expect(answer.status == 400 && answer.code == "invalid_request", "\(answer)")
            #expect(answer.retryable == false)
            #expect(answer.string("error", "message")?.contains("NUL") == true, "\(answer)")
            #expect(try await server.database.value("select count(*) from ferry.sessions") == sessions)
        }
    }

    // MARK: - 42 and the rest: the server

    @Test func aMissingPrivilegeIsInternal() async throws {
        try await withItems { server, device in
            try await server.database.admin.execute("revoke execute on function ferry.table_schema() from ferry_client")
            let schema = try await server.call("GET", "/v1/schema", token: device.accessToken)
            #expect(schema.status == 500 && schema.code == "internal", "\(schema)")
            #expect(schema.string("error", "message") == "internal error", "the database's message stays in the log")
        }
    }

    // MARK: - The table, without a server

    @Test func everySQLStateClassHasOneAnswer() {
        func answer(_ state: String) -> String {
            let error = APIError.database(PostgresError(.server, "message", sqlState: state))
            return "\(error.status.code) \(error.code)"
        }
        let table: [(String, String)] = [
            ("08006", "503 unavailable"), ("40001", "503 unavailable"), ("40P01", "503 unavailable"),
            ("53100", "503 unavailable"), ("53300", "503 unavailable"), ("57014", "503 unavailable"),
            ("57P01", "503 unavailable"), ("55P03", "503 unavailable"), ("25006", "503 unavailable"),
            ("22P02", "400 invalid_request"), ("22P05", "400 invalid_request"), ("54000", "400 invalid_request"),
            ("23505", "409 conflict"), ("23503", "409 conflict"), ("40002", "409 conflict"),
            ("42501", "500 internal"), ("42P01", "500 internal"), ("0A000", "500 internal"), ("P0001", "500 internal"),
            ("XX000", "500 internal"), ("58030", "500 internal"), ("55000", "500 internal"), ("25P02", "500 internal"),
        ]
        for (state, expected) in table {
            #expect(answer(state) == expected, "\(state)")
        }
        #expect(APIError.database(PostgresError(.connectionLost, "")).status.code == 503)
        #expect(
            APIError.database(PostgresError(.connectionLost, "")).response.headers["Retry-After"] == "1",
            "a retry can fix it: when")
        #expect(
            APIError.database(PostgresError(.server, "", sqlState: "23505")).response.headers["Retry-After"]
                == nil)
        #expect(APIError.database(PostgresError(.timeout, "")).status.code == 503)
        #expect(APIError.database(PostgresError(.server, "", sqlState: nil)).status.code == 500)
        let nul = APIError.database(PostgresError(.unsendableText, "a NUL"))
        #expect(nul.status.code == 400 && nul.code == "invalid_request", "a NUL in a text value")
        let data = APIError.database(PostgresError(.server, "value too long", sqlState: "22001"))
        #expect(data.message.hasSuffix("value too long"), "the client's own data: the message says what")
    }
}
