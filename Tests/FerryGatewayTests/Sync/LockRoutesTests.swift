import FerryGateway
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

/// `POST /v1/locks/:table/:key/claim|heartbeat|release` over HTTP with two devices of one
/// user (an email account signed in twice), against ferry.claim_lock, ferry.heartbeat_lock
/// and ferry.release_lock in a migrated database, as `ferry_gateway`.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct LockRoutesTests {
    /// `games` goes stale after the default 30 s, `quick` after 1 s, `saves` after an hour;
    /// `boards` is keyed by an integer; `notes_lww` is no lock table.
    static let tables = """
        create table public.games (
            user_id uuid not null, slot text not null, moves int not null default 0, primary key (user_id, slot));
        select ferry.register_table('games', 'device_lock');
        create table public.quick (user_id uuid not null, slot text not null, primary key (user_id, slot));
        select ferry.register_table('quick', 'device_lock', options => '{"stale_seconds": 1}');
        create table public.saves (user_id uuid not null, slot text not null, primary key (user_id, slot));
        select ferry.register_table('saves', 'device_lock', options => '{"stale_seconds": 3600}');
        create table public.boards (user_id uuid not null, board int not null, primary key (user_id, board));
        select ferry.register_table('boards', 'device_lock');
        create table public.notes_lww (id text primary key, user_id uuid not null);
        select ferry.register_table('notes_lww', 'lww');
        """

    /// The gateway, and two devices (phone, tablet) of one user.
    func withTwoDevices(_ body: (AccountsGateway, TestSession, TestSession) async throws -> Void) async throws {
        try await withAccountsGateway { server in
            try await server.database.admin.execute(Self.tables)
            let phone = try await server.emailAccount("locks@example.com")
            let tabletDevice = UUID().uuidString.lowercased()
            let signedIn = try await server.signIn(
                email: "locks@example.com", password: "correct horse battery", device: tabletDevice)
            try #require(signedIn.status == 200, "sign-in: \(signedIn)")
            let tablet = try server.session(from: signedIn, device: tabletDevice)
            try #require(tablet.userID == phone.userID)
            try await body(server, phone, tablet)
        }
    }

    func lock(
        _ server: AccountsGateway, _ session: TestSession, _ action: String, table: String = "games",
        key: String = "current", force: Bool? = nil
    ) async throws -> APIResponse {
        try await server.call(
            "POST", "/v1/locks/\(table)/\(key)/\(action)", token: session.accessToken,
            json: force.map { ["force": $0] })
    }

    @Test func claimHeldForceHeartbeatLostAndRelease() async throws {
        try await withTwoDevices { server, phone, tablet in
            let free = try await lock(server, phone, "claim")
            #expect(free.status == 200, "\(free)")
            #expect(free.string("holder") == phone.deviceID)
            // docs/PROTOCOL.md, Locks: UTC, microseconds, Z.
            let heartbeatAt = free.string("heartbeat_at") ?? ""
            #expect(try #/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z/#.wholeMatch(in: heartbeatAt) != nil, "\(free)")
            let again = try await lock(server, phone, "claim")
            #expect(again.status == 200 && again.string("holder") == phone.deviceID, "\(again)")
            #expect(try await server.database.value("select count(*) from public.games") == "1")

            let held = try await lock(server, tablet, "claim", force: false)
            #expect(held.status == 409 && held.code == "lock_held", "\(held)")
            #expect(held.string("error", "holder") == phone.deviceID)
            let age = held.value("error", "heartbeat_age_ms") as? Int
            // Just claimed: well under the 30 s stale limit, with room for a loaded machine.
            #expect(age != nil && age! >= 0 && age! < 10_000, "\(held)")

            let heartbeat = try await lock(server, phone, "heartbeat")
            #expect(heartbeat.status == 200 && heartbeat.string("holder") == phone.deviceID, "\(heartbeat)")

            let stampBefore = try await server.database.value("select _stamp::text from public.games")
            let forced = try await lock(server, tablet, "claim", force: true)
            #expect(forced.status == 200 && forced.string("holder") == tablet.deviceID, "\(forced)")
            // Taking the lock updates the row, so the old holder sees it change on its next pull.
            #expect(try await server.database.value("select _stamp::text from public.games") != stampBefore)

            let lost = try await lock(server, phone, "heartbeat")
            #expect(lost.status == 409 && lost.code == "lock_lost", "\(lost)")
            #expect(lost.string("error", "holder") == tablet.deviceID)

            // The non-holder's push to the locked row is refused; the holder's applies.
            let refused = try await server.call(
                "POST", "/v1/push", token: phone.accessToken,
                json: [
                    "mutations": [["id": 1, "table": "games", "op": "upsert", "row": ["slot": "current", "moves": 9]]]
                ])
            let refusedCodes = (refused.value("results") as? [[String: Any]])?.map { $0["code"] as? String }
            #expect(refusedCodes == ["lock_not_held"], "\(refused)")
            let applied = try await server.call(
                "POST", "/v1/push", token: tablet.accessToken,
                json: [
                    "mutations": [["id": 1, "table": "games", "op": "upsert", "row": ["slot": "current", "moves": 3]]]
                ])
            let appliedStatuses = (applied.value("results") as? [[String: Any]])?.map { $0["status"] as? String }
            #expect(appliedStatuses == ["applied"], "\(applied)")

            // Releasing a lock one does not hold changes nothing; the holder's release frees it.
            #expect(try await lock(server, phone, "release").status == 204)
            #expect(try await lock(server, phone, "claim").code == "lock_held")
            let released = try await lock(server, tablet, "release")
            #expect(released.status == 204, "\(released)")
            let after = try await lock(server, phone, "claim")
            #expect(after.status == 200 && after.string("holder") == phone.deviceID, "\(after)")
            #expect(try await server.database.value("select moves::text from public.games") == "3")
        }
    }

    /// The holder in `GET /v1/pull`'s rows of a lock table: a device learns of a takeover
    /// from the pull its cue starts, without a heartbeat.
    @Test func pullsCarryTheLockHolder() async throws {
        try await withTwoDevices { server, phone, tablet in
            func holders(_ session: TestSession) async throws -> [Any?] {
                let pull = try await server.call("GET", "/v1/pull", token: session.accessToken)
                try #require(pull.status == 200, "\(pull)")
                let upserts = pull.value("changes", "games", "upserts") as? [[String: Any]] ?? []
                #expect(upserts.allSatisfy { $0["_lock_device"] == nil && $0["_lock_heartbeat_at"] == nil })
                return upserts.map { $0.keys.contains("_lock_holder") ? $0["_lock_holder"] : "missing" }
            }
            #expect(try await lock(server, phone, "claim").status == 200)
            #expect(try await holders(tablet).map { $0 as? String } == [phone.deviceID])
            #expect(try await lock(server, tablet, "claim", force: true).status == 200)
            #expect(try await holders(phone).map { $0 as? String } == [tablet.deviceID], "the takeover, pulled")
            #expect(try await lock(server, tablet, "release").status == 204)
            let released = try await holders(phone)
            #expect(released.count == 1 && released[0] is NSNull, "nobody holds it: \(released)")
            // A table of another strategy carries no holder.
            let notes = try await server.call(
                "POST", "/v1/push", token: phone.accessToken,
                json: ["mutations": [["id": 1, "table": "notes_lww", "op": "upsert", "row": ["id": "n1"]]]])
            #expect(notes.status == 200)
            let pull = try await server.call("GET", "/v1/pull", token: phone.accessToken)
            let rows = pull.value("changes", "notes_lww", "upserts") as? [[String: Any]] ?? []
            #expect(rows.count == 1 && rows.allSatisfy { !$0.keys.contains("_lock_holder") }, "\(pull)")
        }
    }

    /// quick goes stale after 1 s, saves after an hour (so no slow machine sees it go
    /// stale); the phone claims saves, then quick. The tablet's claims of quick are refused
    /// while its heartbeat is younger than 1 s and succeed once it is older; saves, claimed
    /// earlier still, is still held then (its heartbeat's age, as the server measures it,
    /// proves the second passed for it too).
    @Test func aStaleLockIsTakenOverWithoutForce() async throws {
        try await withTwoDevices { server, phone, tablet in
            #expect(try await lock(server, phone, "claim", table: "saves").status == 200)
            let phonesClaim = try await lock(server, phone, "claim", table: "quick")
            #expect(phonesClaim.status == 200, "\(phonesClaim)")
            var refusedAtAges: [Int] = []
            let taken = try await eventually("quick taken over once stale", seconds: 10) { () -> APIResponse? in
                let answer = try await lock(server, tablet, "claim", table: "quick")
                guard answer.code == "lock_held" else { return answer }
                refusedAtAges.append(answer.value("error", "heartbeat_age_ms") as? Int ?? -1)
                try await Task.sleep(for: .milliseconds(100))
                return nil
            }
            #expect(taken.status == 200 && taken.string("holder") == tablet.deviceID, "\(taken)")
            #expect(refusedAtAges.allSatisfy { (0..<1_000).contains($0) }, "refused at \(refusedAtAges) ms")
            let staleAfter = try await server.database.value(
                "select extract(epoch from $2::timestamptz - $1::timestamptz) >= 1",
                [phonesClaim.string("heartbeat_at") ?? "", taken.string("heartbeat_at") ?? ""])
            #expect(staleAfter == "t", "taken over within a second of the phone's claim")
            #expect(try await lock(server, phone, "heartbeat", table: "quick").code == "lock_lost")
            let saves = try await lock(server, tablet, "claim", table: "saves")
            #expect(saves.code == "lock_held", "\(saves)")
            let age = try #require(saves.value("error", "heartbeat_age_ms") as? Int, "\(saves)")
            #expect(age >= 1_000, "saves was claimed before quick, which went stale after 1 s: \(age) ms")
        }
    }

    @Test func unknownTablesBadKeysAndOtherUsers() async throws {
        try await withTwoDevices { server, phone, _ in
            let lww = try await lock(server, phone, "claim", table: "notes_lww", key: "x")
            #expect(lww.status == 404 && lww.code == "not_found", "\(lww)")
            #expect(try await lock(server, phone, "heartbeat", table: "nope").status == 404)
            #expect(try await lock(server, phone, "release", table: "nope").status == 404)
            let badKey = try await lock(server, phone, "claim", table: "boards", key: "one")
            #expect(badKey.status == 400 && badKey.code == "invalid_request", "\(badKey)")
            let badBody = try await server.call(
                "POST", "/v1/locks/games/current/claim", token: phone.accessToken, json: ["force": "yes"])
            #expect(badBody.status == 400, "\(badBody)")
            #expect(try await server.call("POST", "/v1/locks/games/current/claim").status == 401)

            #expect(try await lock(server, phone, "claim").status == 200)
            // Another user's claim of the same key is on their own row: the first user's
            // lock is neither taken nor visible to them.
            let other = try await server.signUpAnonymous()
            let theirs = try await lock(server, other, "claim", force: true)
            #expect(theirs.status == 200 && theirs.string("holder") == other.deviceID, "\(theirs)")
            #expect(
                try await server.database.rows(
                    "select user_id::text, _lock_device from public.games order by _lock_device"
                )
                .sorted { ($0[0] ?? "") < ($1[0] ?? "") }
                    == [[phone.userID, phone.deviceID], [other.userID, other.deviceID]]
                    .sorted { ($0[0] ?? "") < ($1[0] ?? "") })
            let client = try await server.database.connectAsClient(user: other.userID, device: other.deviceID)
            let visible = try await client.query("select user_id::text from public.games")
            #expect(visible.count == 1 && visible[0, 0] == other.userID)
            await client.close()
            #expect(try await lock(server, other, "release").status == 204)
            #expect(try await lock(server, phone, "heartbeat").status == 200)
        }
    }

    @Test func aClientCannotWriteTheLockColumnsThroughPushOrSQL() async throws {
        try await withTwoDevices { server, phone, tablet in
            #expect(try await lock(server, phone, "claim").status == 200)
            let faked = try await server.call(
                "POST", "/v1/push", token: tablet.accessToken,
                json: [
                    "mutations": [
                        [
                            "id": 1, "table": "games", "op": "upsert",
                            "row": ["slot": "current", "_lock_device": tablet.deviceID],
                        ]
                    ]
                ])
            let codes = (faked.value("results") as? [[String: Any]])?.map { $0["code"] as? String }
            #expect(codes == ["unknown_column"], "\(faked)")

            let client = try await server.database.connectAsClient(user: tablet.userID, device: tablet.deviceID)
            for sql in [
                "update public.games set _lock_device = '\(tablet.deviceID)'",
                "update public.games set _lock_heartbeat_at = now() - interval '1 hour'",
                "insert into public.games (user_id, slot, _lock_device) values (ferry.uid(), 'other', 'x')",
            ] {
                // Refused by the column grants themselves: permission denied, not some other failure.
                let error = await #expect(throws: PostgresError.self, "\(sql)") { try await client.query(sql) }
                #expect(error?.sqlState == "42501", "\(sql): \(String(describing: error))")
            }
            // What push needs stays writable: client columns and the tombstone.
            try await client.query("insert into public.games (user_id, slot) values (ferry.uid(), 'spare')")
            try await client.query("update public.games set moves = 1, _deleted = true where slot = 'spare'")
            await client.close()
            #expect(
                try await server.database.value("select _lock_device from public.games where slot = 'current'")
                    == phone.deviceID)
        }
    }
}
