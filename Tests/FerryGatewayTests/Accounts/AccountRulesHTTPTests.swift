import FerryTestSupport
import Foundation
import Testing

/// Rate limits, the link errors and account deletion over real HTTP, with the
/// database checked afterwards. Clients at different addresses bind their own end to
/// another loopback address (127.0.0.2, …), which the gateway sees as the client's.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct AccountRulesHTTPTests {
    /// A `429 rate_limited` answer with a usable `Retry-After`, whose message names the
    /// limit that was hit (`limit`).
    func expectRateLimited(_ response: APIResponse, limit: String, _ comment: Comment? = nil) {
        #expect(response.status == 429, "\(comment?.rawValue ?? ""): \(response)")
        #expect(response.code == "rate_limited")
        #expect(response.string("error", "message")?.hasPrefix(limit + "; retry after ") == true, "\(response)")
        #expect(response.retryable == true)
        let retryAfter = response.header("Retry-After").flatMap(Int.init)
        #expect(retryAfter.map { (1...3600).contains($0) } == true, "Retry-After: \(String(describing: retryAfter))")
    }

    // MARK: - Rate limits

    @Test func anonymousSignUpsOverThePerAddressLimitAre429WithRetryAfter() async throws {
        try await withAccountsGateway(arguments: ["--anonymous-signups-per-hour", "2"]) { harness in
            for _ in 0..<2 {
                let response = try await harness.call(
                    "POST", "/v1/auth/anonymous", json: ["device_id": UUID().uuidString], source: "127.0.0.1")
                #expect(response.status == 201, "\(response)")
            }
            let third = try await harness.call(
                "POST", "/v1/auth/anonymous", json: ["device_id": UUID().uuidString], source: "127.0.0.1")
            expectRateLimited(third, limit: "too many anonymous sign-ups from this address (2 per hour)")
            #expect(try await harness.database.value("select count(*) from ferry.users") == "2", "no user for a 429")

            let elsewhere = try await harness.call(
                "POST", "/v1/auth/anonymous", json: ["device_id": UUID().uuidString], source: "127.0.0.2")
            #expect(elsewhere.status == 201, "another address has its own allowance: \(elsewhere)")
        }
    }

    @Test func failedSignInsOverTheLimitAre429EvenWithTheRightPassword() async throws {
        try await withAccountsGateway(arguments: ["--failed-signins-per-hour", "3"]) { harness in
            let password = "the right password"
            _ = try await harness.emailAccount("x@example.com", password: password)
            _ = try await harness.emailAccount("y@example.com", password: password)

            // Successes are not counted.
            for _ in 0..<4 {
                let response = try await harness.signIn(email: "x@example.com", password: password, source: "127.0.0.1")
                #expect(response.status == 200, "\(response)")
            }
            // Three failures for x (the email counted however it is spelled), from one address.
            for email in ["x@example.com", "X@Example.com", " x@EXAMPLE.com"] {
                let response = try await harness.signIn(email: email, password: "wrong password", source: "127.0.0.1")
                #expect(response.status == 401, "\(response)")
                #expect(response.code == "invalid_credentials")
            }
            // Per email: the right password from a fresh address is refused too.
            expectRateLimited(
                try await harness.signIn(email: "x@example.com", password: password, source: "127.0.0.2"),
                limit: "too many failed sign-ins for this email (3 per hour)", "x from another address")
            // Per address: another email from the address that failed is refused.
            expectRateLimited(
                try await harness.signIn(email: "y@example.com", password: password, source: "127.0.0.1"),
                limit: "too many failed sign-ins from this address (3 per hour)", "y from the failing address")
            // Neither limit reaches another email from another address.
            let other = try await harness.signIn(email: "y@example.com", password: password, source: "127.0.0.3")
            #expect(other.status == 200, "\(other)")
        }
    }

    // MARK: - Link errors

    @Test func linkingAnEmailInUseIsRefusedCaseInsensitivelyAndChangesNothing() async throws {
        try await withAccountsGateway { harness in
            let owner = try await harness.signUpAnonymous()
            let linked = try await harness.link(owner, email: "Alice@Example.com", password: "alice's password")
            #expect(linked.status == 200, "\(linked)")
            #expect(linked.string("user", "email") == "alice@example.com", "stored lowercased")

            let other = try await harness.signUpAnonymous()
            let state = try await harness.database.accountState()
            for email in ["alice@example.com", "ALICE@EXAMPLE.COM", "  aLiCe@example.COM "] {
                let response = try await harness.link(other, email: email, password: "someone else's")
                #expect(response.status == 409, "\(email): \(response)")
                #expect(response.code == "email_in_use")
            }
            #expect(try await harness.database.accountState() == state)
            let me = try await harness.me(other.accessToken)
            #expect(me.value("user", "is_anonymous") as? Bool == true)
            #expect(me.isNull("user", "email"))
            #expect(
                try await harness.signIn(email: "alice@example.com", password: "alice's password").status == 200)
        }
    }

    @Test func linkingAnAccountThatHasAnEmailIsAlreadyLinkedAndChangesNothing() async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.emailAccount("first@example.com", password: "first password")
            let signedIn = try await harness.signIn(email: "first@example.com", password: "first password")
            let emailToken = try #require(signedIn.string("session", "access_token"))
            #expect(decodeClaims(emailToken)["anon"] as? Bool == false)
            let state = try await harness.database.accountState()

            // The sign-up token still says anon (it was issued before the link): the database decides.
            let withOldToken = try await harness.link(session, email: "second@example.com", password: "second password")
            let withEmailToken = try await harness.call(
                "POST", "/v1/auth/link", token: emailToken,
                json: ["email": "second@example.com", "password": "second password"])
            for response in [withOldToken, withEmailToken] {
                #expect(response.status == 409, "\(response)")
                #expect(response.code == "already_linked")
            }
            #expect(try await harness.database.accountState() == state)
            #expect(try await harness.signIn(email: "first@example.com", password: "first password").status == 200)
            #expect(try await harness.signIn(email: "second@example.com", password: "second password").status == 401)
        }
    }

    @Test func linkingAnInvalidEmailOrAWeakPasswordIsRefusedAndChangesNothing() async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            let state = try await harness.database.accountState()
            for email in ["not-an-email", "", "@example.com", "a@example", "a@@example.com", "a b@example.com"] {
                let response = try await harness.link(session, email: email, password: "long enough password")
                #expect(response.status == 400, "\(email): \(response)")
                #expect(response.code == "invalid_email", "\(email)")
            }
            for password in ["", "1234567", "seven77"] {
                let response = try await harness.link(session, email: "ok@example.com", password: password)
                #expect(response.status == 400, "\(password): \(response)")
                #expect(response.code == "weak_password")
            }
            #expect(try await harness.database.accountState() == state)
            #expect(try await harness.me(session.accessToken).value("user", "is_anonymous") as? Bool == true)
            // Eight characters is enough.
            #expect(try await harness.link(session, email: "ok@example.com", password: "12345678").status == 200)
        }
    }

    // MARK: - Deletion

    @Test func deletingAnAccountLeavesNothingOfItBehind() async throws {
        try await withAccountsGateway(createNotes: true) { harness in
            let database = harness.database
            let first = try await harness.emailAccount("leaving@example.com", password: "leaving password")
            let second = try harness.session(
                from: try await harness.signIn(email: "leaving@example.com", password: "leaving password"),
                device: UUID().uuidString)
            _ = try await harness.refresh(second.refreshToken)
            let user = first.userID
            try await database.seedNotes(owner: user, [("n1", "mine"), ("n2", "mine too")])
            try await database.seedNotes(owner: user, [("n3", "gone")], deleted: true)
            let stayer = try await harness.emailAccount("staying@example.com", password: "staying password")
            try await database.seedNotes(owner: stayer.userID, [("n1", "theirs")])
            let sessions = try await database.rows("select id::text from ferry.sessions where user_id = $1", [user])
                .compactMap { $0[0] }
            #expect(sessions.count == 2)
            let stayerNotes = try await database.notes(of: stayer.userID)
            let stayerSessions = try await database.rows(
                "select id, revoked_at from ferry.sessions where user_id = $1", [stayer.userID])

            let response = try await harness.call(
                "DELETE", "/v1/account", token: second.accessToken, json: ["confirm": "DELETE"])
            #expect(response.status == 204, "\(response)")

            #expect(try await database.userExists(user) == false)
            #expect(try await database.value("select count(*) from ferry.sessions where user_id = $1", [user]) == "0")
            #expect(
                try await database.value(
                    "select count(*) from ferry.refresh_tokens where session_id::text = any($1::text[])",
                    ["{\(sessions.joined(separator: ","))}"]) == "0")
            #expect(try await database.notes(of: user).isEmpty, "live rows and tombstones")
            #expect(
                try await database.rows(
                    "select reason from ferry.revocations where user_id = $1 order by session_id", [user])
                    == [["account_deleted"], ["account_deleted"]], "every gateway is told about both sessions")
            for token in [first.accessToken, second.accessToken] {
                #expect(try await harness.me(token).code == "session_revoked")
            }
            #expect(try await harness.signIn(email: "leaving@example.com", password: "leaving password").status == 401)

            #expect(try await database.notes(of: stayer.userID) == stayerNotes)
            #expect(
                try await database.rows("select id, revoked_at from ferry.sessions where user_id = $1", [stayer.userID])
                    == stayerSessions)
            #expect(try await harness.me(stayer.accessToken).status == 200)
        }
    }

    @Test func deletionWithoutTheExactConfirmationChangesNothing() async throws {
        try await withAccountsGateway(createNotes: true) { harness in
            let session = try await harness.signUpAnonymous()
            try await harness.database.seedNotes(owner: session.userID, [("n1", "kept")])
            let state = try await harness.database.accountState()
            let bodies: [[String: Any]?] = [nil, [:], ["confirm": "delete"], ["confirm": "DELETE "], ["confirm": true]]
            for body in bodies {
                let response = try await harness.call("DELETE", "/v1/account", token: session.accessToken, json: body)
                #expect(response.status == 400, "\(String(describing: body)): \(response)")
                #expect(response.code == "confirmation_required")
            }
            #expect(try await harness.database.accountState() == state)
            #expect(try await harness.database.notes(of: session.userID) == [["n1", "kept", "false"]])
        }
    }
}
