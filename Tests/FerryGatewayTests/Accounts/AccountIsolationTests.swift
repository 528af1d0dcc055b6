import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

/// The roles of docs/OPERATIONS.md ("Roles"), checked with hand-written SQL on a
/// connection logged in as `ferry_gateway`, switched to `ferry_client` the way the
/// gateway does per request: the auth tables are out of reach, the pre-auth functions
/// too, and the functions a signed-in request may call act on the caller alone.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct AccountIsolationTests {
    /// The auth tables, each with a column to write.
    static let authTables = [
        ("ferry.users", "created_at"), ("ferry.sessions", "created_at"), ("ferry.refresh_tokens", "created_at"),
        ("ferry.revocations", "revoked_at"),
    ]

    /// Statements that must fail with `permission denied` (42501).
    func expectDenied(_ client: PostgresClient, _ statements: [String]) async {
        for sql in statements {
            do {
                _ = try await client.query(sql)
                Issue.record("allowed, but must be denied: \(sql)")
            } catch {
                #expect(error.sqlState == "42501", "\(sql): \(error)")
            }
        }
    }

    /// Reading, changing, adding and deleting rows of every auth table.
    static var tableStatements: [String] {
        authTables.flatMap { table, column in
            [
                "select * from \(table)", "update \(table) set \(column) = now()", "delete from \(table)",
                "insert into \(table) default values",
            ]
        }
    }

    /// Switches the connection to the request role as `user` in `session`, session-wide
    /// (the gateway does it transaction-locally; the privileges are the same).
    func become(_ client: PostgresClient, user: String, session: String) async throws {
        _ = try await client.query(
            """
            select set_config('role', 'ferry_client', false), set_config('ferry.user_id', $1, false),
                set_config('ferry.session_id', $2, false), set_config('ferry.device_id', 'hand-written', false)
            """, [user, session])
        #expect(try await client.query("select current_user")[0, 0] == "ferry_client")
    }

    @Test func gatewayRoleCannotReadOrWriteTheAuthTables() async throws {
        try await AccountsDatabase.with { database in
            let gateway = try await database.connectAsGateway()
            #expect(try await gateway.query("select current_user")[0, 0] == "ferry_gateway")
            await expectDenied(gateway, Self.tableStatements)
            await gateway.close()
        }
    }

    @Test func requestRoleCannotTouchTheAuthTablesNorCallPreAuthFunctions() async throws {
        try await withAccountsGateway(createNotes: true) { harness in
            let a = try await harness.signUpAnonymous()
            let b = try await harness.emailAccount("b@example.com")
            let client = try await harness.database.connectAsGateway()
            try await become(client, user: a.userID, session: a.sessionID)
            await expectDenied(client, Self.tableStatements)
            await expectDenied(
                client,
                [
                    "select * from ferry.sign_up_anonymous('device', 'hash')",
                    "select * from ferry.refresh_session('hash', 'chain', 'new-hash', 'sealed', '30 seconds')",
                    "select * from ferry.find_credentials('b@example.com')",
                    "select * from ferry.sign_in('\(b.userID)', 'device', 'hash', null, null)",
                    "select ferry.cleanup_anonymous('0 seconds', 1000)",
                    "select ferry.count_inactive_anonymous('0 seconds')",
                    "select * from ferry.recent_revocations('-infinity')",
                    // The helpers behind them, which take user ids as arguments.
                    "select ferry.count_user_rows('\(b.userID)')",
                    "select ferry.delete_user_rows('\(b.userID)')",
                    "select ferry.move_user_rows('\(b.userID)', '\(a.userID)')",
                    "select ferry.announce_revocation('\(b.sessionID)', '\(b.userID)', 'signed_out')",
                    "select ferry.open_session('\(b.userID)', 'device', 'hash')",
                ])
            await client.close()
            #expect(try await harness.me(b.accessToken).status == 200)
            #expect(try await harness.database.userExists(b.userID))
        }
    }

    @Test func signOutAsTheRequestRoleRevokesOnlyTheCallersSession() async throws {
        try await withAccountsGateway { harness in
            let a = try await harness.signUpAnonymous()
            let b = try await harness.signUpAnonymous()
            let client = try await harness.database.connectAsGateway()
            let revoked = "select id::text from ferry.sessions where revoked_at is not null order by id"

            // A mixed identity (A's user with B's session, and the reverse) matches nothing.
            try await become(client, user: a.userID, session: b.sessionID)
            _ = try await client.query("select ferry.sign_out()")
            try await become(client, user: b.userID, session: a.sessionID)
            _ = try await client.query("select ferry.sign_out()")
            #expect(try await harness.database.rows(revoked).isEmpty)

            try await become(client, user: a.userID, session: a.sessionID)
            _ = try await client.query("select ferry.sign_out()")
            await client.close()
            #expect(try await harness.database.rows(revoked) == [[a.sessionID]])
            #expect(try await harness.me(b.accessToken).status == 200)
            #expect(try await harness.refresh(b.refreshToken).status == 200)
        }
    }

    @Test func deleteAccountAsTheRequestRoleDeletesOnlyTheCaller() async throws {
        try await withAccountsGateway(createNotes: true) { harness in
            let a = try await harness.signUpAnonymous()
            let b = try await harness.signUpAnonymous()
            let database = harness.database
            try await database.seedNotes(owner: a.userID, [("n1", "a's")])
            try await database.seedNotes(owner: b.userID, [("n1", "b's"), ("n2", "b's too")])
            let client = try await harness.database.connectAsGateway()

            try await become(client, user: b.userID, session: a.sessionID)
            #expect(try await client.query("select ferry.delete_account()")[0, 0] == "revoked")
            #expect(try await database.userExists(b.userID), "B's id with A's session deletes nothing")

            try await become(client, user: a.userID, session: a.sessionID)
            #expect(try await client.query("select ferry.delete_account()")[0, 0] == "ok")
            await client.close()
            #expect(try await database.userExists(a.userID) == false)
            #expect(try await database.notes(of: a.userID).isEmpty)
            #expect(try await database.notes(of: b.userID) == [["n1", "b's", "false"], ["n2", "b's too", "false"]])
            #expect(
                try await database.value("select count(*) from ferry.sessions where user_id = $1", [b.userID]) == "1")
            #expect(try await harness.me(b.accessToken).status == 200)
        }
    }
}
