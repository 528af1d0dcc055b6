import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// `POST /v1/auth/password` (PROTOCOL.md "Accounts"): the device gets a new session, every
/// other session of the account ends (its streams close `session_revoked`), the old
/// password stops working; a wrong current password, an anonymous caller and a weak new
/// password change nothing.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct PasswordChangeTests {
    func change(_ server: AccountsGateway, _ session: TestSession, from current: String, to new: String)
        async throws -> APIResponse
    {
        try await server.call(
            "POST", "/v1/auth/password", token: session.accessToken,
            json: ["current_password": current, "new_password": new])
    }

    @Test func aChangeGivesThisDeviceANewSessionAndEndsEveryOtherOne() async throws {
        try await withAccountsGateway { server in
            let phone = try await server.emailAccount("ana@example.org", password: "old password 1")
            let signedIn = try await server.signIn(email: "ana@example.org", password: "old password 1")
            let tablet = try server.session(from: signedIn, device: UUID().uuidString.lowercased())
            let stream = try await server.openStream(tablet, .webSocket)
            _ = try await stream.nextMessageAsync(ofType: "hello")

            let changed = try await change(server, phone, from: "old password 1", to: "new password 2")
            #expect(changed.status == 200, "\(changed)")
            #expect(changed.string("user", "id") == phone.userID)
            #expect(changed.string("user", "email") == "ana@example.org")
            #expect(changed.value("user", "is_anonymous") as? Bool == false)
            let renewed = try server.session(from: changed, device: phone.deviceID)
            #expect(renewed.sessionID != phone.sessionID)
            #expect(renewed.claims["did"] as? String == phone.deviceID)
            #expect(renewed.claims["anon"] as? Bool == false)
            #expect(try await server.me(renewed.accessToken).status == 200)

            let closed = try await stream.nextCloseAsync()
            #expect(closed.code == 4003 && closed.reason == "session_revoked", "\(closed)")
            #expect(try await server.me(tablet.accessToken).code == "session_revoked")
            #expect(try await server.me(phone.accessToken).code == "session_revoked")
            #expect(try await server.refresh(tablet.refreshToken).code == "session_revoked")
            #expect(try await server.signIn(email: "ana@example.org", password: "old password 1").status == 401)
            #expect(try await server.signIn(email: "ana@example.org", password: "new password 2").status == 200)
            #expect(try await server.refresh(renewed.refreshToken).status == 200)
            #expect(
                try await server.database.value(
                    "select count(*) from ferry.revocations where reason = 'password_changed'") == "2")
        }
    }

    @Test func aWrongCurrentPasswordIs401AndChangesNothing() async throws {
        try await withAccountsGateway { server in
            let phone = try await server.emailAccount("bo@example.org", password: "right password")
            let before = try await server.database.accountState()
            let refused = try await change(server, phone, from: "wrong password", to: "new password 2")
            #expect(refused.status == 401 && refused.code == "invalid_credentials", "\(refused)")
            #expect(try await server.database.accountState() == before)
            #expect(try await server.me(phone.accessToken).status == 200)
        }
    }

    @Test func anAnonymousCallerIs403AndAWeakPasswordIs400() async throws {
        try await withAccountsGateway { server in
            let anonymous = try await server.signUpAnonymous()
            let refused = try await change(server, anonymous, from: "anything at all", to: "new password 2")
            #expect(refused.status == 403 && refused.code == "forbidden", "\(refused)")
            let linked = try await server.emailAccount("cleo@example.org", password: "right password")
            let weak = try await change(server, linked, from: "right password", to: "short")
            #expect(weak.status == 400 && weak.code == "weak_password", "\(weak)")
            let missing = try await server.call(
                "POST", "/v1/auth/password", token: linked.accessToken, json: ["new_password": "new password 2"])
            #expect(missing.status == 400 && missing.code == "invalid_request", "\(missing)")
            let unauthenticated = try await server.call(
                "POST", "/v1/auth/password", json: ["current_password": "right password", "new_password": "x"])
            #expect(unauthenticated.status == 401)
        }
    }

    @Test func aTokenIssuedBeforeTheLinkMayChangeThePassword() async throws {
        try await withAccountsGateway { server in
            // emailAccount links with the anonymous session's token: its claims still say anon.
            let linked = try await server.emailAccount("dee@example.org", password: "right password")
            #expect(linked.claims["anon"] as? Bool == true)
            #expect(try await change(server, linked, from: "right password", to: "new password 2").status == 200)
        }
    }

    @Test func wrongCurrentPasswordsCountAsFailedSignIns() async throws {
        try await withAccountsGateway(arguments: ["--failed-signins-per-hour", "2"]) { server in
            let phone = try await server.emailAccount("eve@example.org", password: "right password")
            for _ in 0..<2 {
                #expect(try await change(server, phone, from: "wrong password", to: "new one 22").status == 401)
            }
            let limited = try await change(server, phone, from: "right password", to: "new password 2")
            #expect(limited.status == 429 && limited.header("Retry-After") != nil, "\(limited)")
            // Counted in PostgreSQL, as a sign-in's are: the email's sign-ins are refused too.
            let failed = try await server.database.value(
                "select count(*) from ferry.sign_in_attempts where email = 'eve@example.org' and outcome = 'failed'")
            #expect(failed == "2")
            let signIn = try await server.signIn(
                email: "eve@example.org", password: "right password", source: "127.0.0.2")
            #expect(signIn.status == 429, "\(signIn)")
        }
    }

    @Test func aRightCurrentPasswordCountsForNothing() async throws {
        try await withAccountsGateway(arguments: ["--failed-signins-per-hour", "2"]) { server in
            var phone = try await server.emailAccount("fay@example.org", password: "password 0")
            for step in 1...3 {
                let changed = try await change(server, phone, from: "password \(step - 1)", to: "password \(step)")
                #expect(changed.status == 200, "\(changed)")
                phone = try server.session(from: changed, device: phone.deviceID)
            }
            #expect(try await server.database.value("select count(*) from ferry.sign_in_attempts") == "0")
        }
    }
}
