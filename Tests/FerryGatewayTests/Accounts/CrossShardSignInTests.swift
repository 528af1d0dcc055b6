import FerryTestSupport
import Foundation
import Testing

/// A first sign-in across shards (docs/SCALING.md, "The email directory"): the device's
/// anonymous user on shard 1, the email account on shard 2, the sign-in sent to shard 1
/// with the device's token. With no device rows, or `keep_cloud`, shard 2 signs the device
/// in and shard 1 deletes the anonymous user (and its rows); with rows and no `resolve`,
/// or `keep_device`, shard 2 only checks the credentials and nothing changes on either.
/// Recovery of another shard's email is answered by that shard, and `Retry-After` comes
/// back with a forwarded `429`.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct CrossShardSignInTests {
    static let email = "cloud@example.com"
    static let password = "the cloud password"

    /// The account on shard 2 (with `notes` on both shards) and an anonymous user on shard 1.
    struct Accounts {
        let cloud: TestSession
        let device: TestSession
    }

    func accounts(_ shards: DirectoryShards) async throws -> Accounts {
        try await shards[0].database.createNotes()
        try await shards[1].database.createNotes()
        return Accounts(
            cloud: try await shards[1].emailAccount(Self.email, password: Self.password),
            device: try await shards[0].signUpAnonymous())
    }

    /// Signs in to the account at shard 1 on the anonymous user's device, with its token.
    func signIn(
        _ shards: DirectoryShards, _ accounts: Accounts, password: String = password, resolve: String? = nil
    ) async throws -> APIResponse {
        try await shards[0].signIn(
            email: Self.email, password: password, device: accounts.device.deviceID,
            bearer: accounts.device.accessToken, resolve: resolve)
    }

    func expectSignedIn(_ response: APIResponse, _ accounts: Accounts, reset: Bool) {
        #expect(response.status == 200, "\(response)")
        #expect(response.string("user", "id") == accounts.cloud.userID)
        #expect(response.string("user", "email") == Self.email)
        #expect(response.value("reset") as? Bool == reset, "\(response)")
        #expect(response.string("session", "refresh_token")?.hasPrefix("2.") == true, "a session of shard 2")
        let token = response.string("session", "access_token") ?? ""
        #expect(decodeClaims(token)["did"] as? String == accounts.device.deviceID)
    }

    /// The anonymous user and its rows are gone from shard 1 and its token is revoked.
    func expectAnonymousUserGone(_ shards: DirectoryShards, _ accounts: Accounts) async throws {
        #expect(try await shards[0].database.userExists(accounts.device.userID) == false)
        #expect(try await shards[0].database.notes(of: accounts.device.userID).isEmpty)
        let me = try await shards[0].me(accounts.device.accessToken)
        #expect(me.status == 401 && me.code == "session_revoked", "\(me)")
    }

    /// What both shards hold: the device's user and notes, the account's sessions and notes.
    func state(_ shards: DirectoryShards, _ accounts: Accounts) async throws -> [String] {
        [
            String(try await shards[0].database.userExists(accounts.device.userID)),
            "\(try await shards[0].database.notes(of: accounts.device.userID))",
            try await shards[1].database.value(
                "select count(*) from ferry.sessions where user_id = $1", [accounts.cloud.userID]) ?? "",
            "\(try await shards[1].database.notes(of: accounts.cloud.userID))",
        ]
    }

    @Test func anAnonymousUserWithoutRowsIsDeletedOnceTheAccountsShardSignedIn() async throws {
        try await withDirectoryShards { shards in
            let accounts = try await accounts(shards)
            try await shards[1].database.seedNotes(owner: accounts.cloud.userID, [("c1", "cloud one")])
            let response = try await signIn(shards, accounts)
            expectSignedIn(response, accounts, reset: false)
            try await expectAnonymousUserGone(shards, accounts)
            #expect(try await shards[1].database.notes(of: accounts.cloud.userID) == [["c1", "cloud one", "false"]])
            let session = try shards[1].session(from: response, device: accounts.device.deviceID)
            #expect(try await shards[1].me(session.accessToken).status == 200)
        }
    }

    @Test func deviceRowsWithoutResolveAreResolutionRequiredAndChangeNothing() async throws {
        try await withDirectoryShards { shards in
            let accounts = try await accounts(shards)
            try await shards[0].database.seedNotes(owner: accounts.device.userID, [("d1", "one"), ("d2", "two")])
            try await shards[0].database.seedNotes(owner: accounts.device.userID, [("d3", "gone")], deleted: true)
            try await shards[1].database.seedNotes(
                owner: accounts.cloud.userID, [("c1", "a"), ("c2", "b"), ("c3", "c")])
            let before = try await state(shards, accounts)

            let response = try await signIn(shards, accounts)
            #expect(response.status == 409 && response.code == "resolution_required", "\(response)")
            #expect(response.value("error", "device_rows") as? Int == 2, "\(response)")
            #expect(response.value("error", "cloud_rows") as? Int == 3, "\(response)")
            #expect(try await state(shards, accounts) == before)
            #expect(try await shards[0].me(accounts.device.accessToken).status == 200)

            // The check is a password check there: a wrong password is refused and counted.
            let wrong = try await signIn(shards, accounts, password: "not the password")
            #expect(wrong.status == 401 && wrong.code == "invalid_credentials", "\(wrong)")
            let failed = try await shards[1].database.value(
                "select count(*) from ferry.sign_in_attempts where outcome = 'failed'")
            #expect(failed == "1")
            #expect(try await state(shards, accounts) == before)
        }
    }

    @Test func keepDeviceIsRefusedAcrossShardsAndChangesNothing() async throws {
        try await withDirectoryShards { shards in
            let accounts = try await accounts(shards)
            try await shards[0].database.seedNotes(owner: accounts.device.userID, [("d1", "one")])
            try await shards[1].database.seedNotes(owner: accounts.cloud.userID, [("c1", "a")])
            let before = try await state(shards, accounts)
            let response = try await signIn(shards, accounts, resolve: "keep_device")
            #expect(response.status == 409 && response.code == "keep_device_across_shards", "\(response)")
            #expect(try await state(shards, accounts) == before)
            // Only for the right credentials: else the usual refusal.
            let wrong = try await signIn(shards, accounts, password: "not the password", resolve: "keep_device")
            #expect(wrong.status == 401 && wrong.code == "invalid_credentials", "\(wrong)")
            #expect(try await state(shards, accounts) == before)
        }
    }

    @Test func keepCloudDeletesTheAnonymousUserAndItsRowsAndResets() async throws {
        try await withDirectoryShards { shards in
            let accounts = try await accounts(shards)
            try await shards[0].database.seedNotes(owner: accounts.device.userID, [("d1", "one"), ("d2", "two")])
            try await shards[1].database.seedNotes(owner: accounts.cloud.userID, [("c1", "a")])
            let response = try await signIn(shards, accounts, resolve: "keep_cloud")
            expectSignedIn(response, accounts, reset: true)
            try await expectAnonymousUserGone(shards, accounts)
            #expect(try await shards[1].database.notes(of: accounts.cloud.userID) == [["c1", "a", "false"]])
        }
    }

    @Test func aShardThatDoesNotAnswerChangesNothingHere() async throws {
        try await withDirectoryShards { shards in
            try await shards[0].database.createNotes()
            let device = try await shards[0].signUpAnonymous()
            try await shards[0].database.seedNotes(owner: device.userID, [("d1", "one")])
            // Shard 3 has no gateway: its URL is a closed port.
            _ = try await shards.directory.admin.query(
                "insert into directory.emails (email, shard, user_id, state, linked_at) values ($1, 3, $2, 'linked', now())",
                ["dee@example.com", UUID().uuidString.lowercased()])
            for resolve in [nil, "keep_cloud", "keep_device"] {
                let answer = try await shards[0].signIn(
                    email: "dee@example.com", password: Self.password, device: device.deviceID,
                    bearer: device.accessToken, resolve: resolve)
                #expect(answer.status == 503 && answer.code == "shard_unavailable", "\(answer)")
            }
            #expect(try await shards[0].database.notes(of: device.userID) == [["d1", "one", "false"]])
            #expect(try await shards[0].me(device.accessToken).status == 200)
            // Bad input is refused here, before any forwarding.
            let bad = try await shards[0].call(
                "POST", "/v1/auth/signin", token: device.accessToken,
                json: ["email": "dee@example.com", "password": Self.password, "device_id": "not a uuid"])
            #expect(bad.status == 400, "\(bad)")
        }
    }

    /// The check-only header is another shard's: a client sending it alone signs in as
    /// usual; with `X-Ferry-Forwarded` it is checked and counted, and no session opens.
    @Test func theCheckHeaderIsHonouredOnlyOnAForwardedRequest() async throws {
        try await withDirectoryShards { shards in
            let accounts = try await accounts(shards)
            try await shards[1].database.seedNotes(owner: accounts.cloud.userID, [("c1", "a"), ("c2", "b")])
            let body: [String: Any] = [
                "email": Self.email, "password": Self.password, "device_id": UUID().uuidString.lowercased(),
            ]
            let plain = try await shards[1].call(
                "POST", "/v1/auth/signin", json: body, headers: [("X-Ferry-Signin-Check", "1")])
            #expect(plain.status == 200 && plain.string("session", "access_token") != nil, "\(plain)")
            let sessions = try await shards[1].database.value(
                "select count(*) from ferry.sessions where user_id = $1", [accounts.cloud.userID])
            let checked = try await shards[1].call(
                "POST", "/v1/auth/signin", json: body,
                headers: [("X-Ferry-Forwarded", "1"), ("X-Ferry-Signin-Check", "1")])
            #expect(checked.status == 200 && checked.value("cloud_rows") as? Int == 2, "\(checked)")
            #expect(checked.value("session") == nil)
            #expect(
                try await shards[1].database.value(
                    "select count(*) from ferry.sessions where user_id = $1", [accounts.cloud.userID]) == sessions)
        }
    }

    @Test func aForwardedRateLimitKeepsItsRetryAfter() async throws {
        try await withDirectoryShards(arguments: ["--failed-signins-per-hour", "2"]) { shards in
            _ = try await shards[1].emailAccount(Self.email, password: Self.password)
            var statuses: [Int] = []
            var retryAfter: String?
            for _ in 0..<4 {
                let answer = try await shards[0].signIn(email: Self.email, password: "not the password")
                statuses.append(answer.status)
                if answer.status == 429 { retryAfter = answer.header("Retry-After") }
            }
            #expect(statuses == [401, 401, 429, 429], "\(statuses)")
            let seconds = try #require(retryAfter.flatMap(Int.init), "no Retry-After")
            #expect((1...3600).contains(seconds))
        }
    }

    @Test func recoveryOfAnotherShardsEmailIsAnsweredThere() async throws {
        let smtp = try SMTPTestServer()
        try await withDirectoryShards(arguments: ["--smtp-url", smtp.url]) { shards in
            let account = try await shards[1].emailAccount("rae@example.org", password: "forgotten password")
            let requested = try await shards[0].call("POST", "/v1/auth/recover", json: ["email": "Rae@Example.org"])
            #expect(requested.status == 202, "\(requested)")
            let code = try await smtp.code(sentTo: "rae@example.org")
            func confirm(_ code: String) async throws -> APIResponse {
                try await shards[0].call(
                    "POST", "/v1/auth/recover/confirm",
                    json: [
                        "email": "rae@example.org", "code": code, "new_password": "brand new password",
                        "device_id": UUID().uuidString.lowercased(),
                    ])
            }
            let wrong = try await confirm(code == "ZZZZ2345" ? "ZZZZ2346" : "ZZZZ2345")
            #expect(wrong.status == 400 && wrong.code == "invalid_code", "\(wrong)")
            let reset = try await confirm(code)
            #expect(reset.status == 200, "\(reset)")
            #expect(reset.string("user", "id") == account.userID)
            #expect(reset.string("session", "refresh_token")?.hasPrefix("2.") == true)
            #expect(try await shards[1].me(account.accessToken).code == "session_revoked")
            let signedIn = try await shards[0].signIn(email: "rae@example.org", password: "brand new password")
            #expect(signedIn.status == 200, "\(signedIn)")

            // Shard 3 does not answer: the request is 202 all the same, the confirmation 503.
            _ = try await shards.directory.admin.query(
                "insert into directory.emails (email, shard, user_id, state, linked_at) values ($1, 3, $2, 'linked', now())",
                ["dee@example.org", UUID().uuidString.lowercased()])
            let unanswered = try await shards[0].call("POST", "/v1/auth/recover", json: ["email": "dee@example.org"])
            #expect(unanswered.status == 202 && unanswered.raw.body == requested.raw.body, "\(unanswered)")
            let down = try await shards[0].call(
                "POST", "/v1/auth/recover/confirm",
                json: [
                    "email": "dee@example.org", "code": "ABCD2345", "new_password": "brand new password",
                    "device_id": UUID().uuidString.lowercased(),
                ])
            #expect(down.status == 503 && down.code == "shard_unavailable", "\(down)")
            let bad = try await shards[0].call("POST", "/v1/auth/recover", json: ["email": "not an email"])
            #expect(bad.status == 400 && bad.code == "invalid_email", "\(bad)")
        }
    }
}
