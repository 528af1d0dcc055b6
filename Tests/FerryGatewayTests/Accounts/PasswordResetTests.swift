import FerryAuth
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// A password reset by a mailed code (PROTOCOL.md "Accounts"), against a real SMTP server
/// (aiosmtpd): the same `202` whether or not the email has an account, the code from the
/// mail sets the password once and ends every other session, and a wrong, used, expired
/// or fifth-wrong code is `400 invalid_code`; requests are rate limited; the database
/// keeps only the code's hash.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct PasswordResetTests {
    func withMailingGateway(
        arguments: [String] = [], _ body: (AccountsGateway, SMTPTestServer) async throws -> Void
    ) async throws {
        let smtp = try SMTPTestServer()
        try await withAccountsGateway(arguments: ["--smtp-url", smtp.url] + arguments) { server in
            try await body(server, smtp)
        }
    }

    func recover(_ server: AccountsGateway, _ email: String) async throws -> APIResponse {
        try await server.call("POST", "/v1/auth/recover", json: ["email": email])
    }

    func confirm(
        _ server: AccountsGateway, _ email: String, code: String, password: String = "brand new password",
        device: String = UUID().uuidString.lowercased()
    ) async throws -> APIResponse {
        try await server.call(
            "POST", "/v1/auth/recover/confirm",
            json: ["email": email, "code": code, "new_password": password, "device_id": device])
    }

    @Test func theMailedCodeSetsANewPasswordOnceAndEndsEveryOtherSession() async throws {
        try await withMailingGateway { server, smtp in
            let phone = try await server.emailAccount("ana@example.org", password: "forgotten password")
            let requested = try await recover(server, "Ana@Example.org")
            #expect(requested.status == 202, "\(requested)")
            let code = try await smtp.code(sentTo: "ana@example.org")
            #expect(try await confirm(server, "ana@example.org", code: "ZZZZ2345").code == "invalid_code")

            let device = UUID().uuidString.lowercased()
            // As a person types it: lower case, a hyphen.
            let typed = code.prefix(4).lowercased() + "-" + code.dropFirst(4).lowercased()
            let reset = try await confirm(server, "ana@example.org", code: typed, device: device)
            #expect(reset.status == 200, "\(reset)")
            #expect(reset.string("user", "id") == phone.userID)
            let session = try server.session(from: reset, device: device)
            #expect(session.claims["did"] as? String == device)
            #expect(try await server.me(session.accessToken).status == 200)
            #expect(try await server.me(phone.accessToken).code == "session_revoked")
            #expect(try await server.signIn(email: "ana@example.org", password: "forgotten password").status == 401)
            #expect(try await server.signIn(email: "ana@example.org", password: "brand new password").status == 200)
            // Used: the same code again is refused and changes nothing.
            let again = try await confirm(server, "ana@example.org", code: code, password: "another password")
            #expect(again.status == 400 && again.code == "invalid_code", "\(again)")
            #expect(try await server.signIn(email: "ana@example.org", password: "brand new password").status == 200)
        }
    }

    @Test func anEmailWithoutAnAccountIsAnsweredTheSameAndGetsNoMail() async throws {
        try await withMailingGateway { server, smtp in
            _ = try await server.emailAccount("bo@example.org")
            let unknown = try await recover(server, "nobody@example.org")
            let known = try await recover(server, "bo@example.org")
            #expect(unknown.status == 202 && known.status == 202)
            #expect(unknown.raw.body == known.raw.body)
            _ = try await smtp.mail(to: "bo@example.org")
            try await eventually("the queue empties") {
                try await server.database.value("select count(*) from ferry.mail_queue") == "0"
            }
            #expect(smtp.mails(to: "nobody@example.org").isEmpty)
            #expect(try await confirm(server, "nobody@example.org", code: "ABCD2345").code == "invalid_code")
            let anonymous = try await recover(server, "not an email")
            #expect(anonymous.status == 400 && anonymous.code == "invalid_email")
        }
    }

    @Test func theFifthWrongCodeVoidsTheCode() async throws {
        try await withMailingGateway { server, smtp in
            _ = try await server.emailAccount("cleo@example.org")
            _ = try await recover(server, "cleo@example.org")
            let code = try await smtp.code(sentTo: "cleo@example.org")
            let wrong = code == "ZZZZ2345" ? "ZZZZ2346" : "ZZZZ2345"
            for _ in 0..<5 {
                #expect(try await confirm(server, "cleo@example.org", code: wrong).code == "invalid_code")
            }
            let late = try await confirm(server, "cleo@example.org", code: code)
            #expect(late.status == 400 && late.code == "invalid_code", "\(late)")
            // A new request mails a new code, which works.
            _ = try await recover(server, "cleo@example.org")
            let fresh = try await smtp.code(sentTo: "cleo@example.org", count: 2)
            #expect(try await confirm(server, "cleo@example.org", code: fresh).status == 200)
        }
    }

    @Test func aWrongCodeIsNotHashedAndCountsAsAFailedSignIn() async throws {
        try await withMailingGateway(arguments: ["--failed-signins-per-hour", "3"]) { server, smtp in
            _ = try await server.emailAccount("dora@example.org")
            _ = try await recover(server, "dora@example.org")
            let code = try await smtp.code(sentTo: "dora@example.org")
            let wrong = code == "ZZZZ2345" ? "ZZZZ2346" : "ZZZZ2345"
            let hashes = server.gateway.accounts.passwords.hashesComputed
            for wrongCode in [wrong, "not a code"] {
                #expect(try await confirm(server, "dora@example.org", code: wrongCode).code == "invalid_code")
            }
            #expect(server.gateway.accounts.passwords.hashesComputed == hashes, "no new password hashed")
            let failed = try await server.database.value(
                "select count(*) from ferry.sign_in_attempts where email = 'dora@example.org' and outcome = 'failed'")
            #expect(failed == "2")
            // The right code is a sign-in: it counts against the account, not as a failure.
            #expect(try await confirm(server, "dora@example.org", code: code).status == 200)
            #expect(server.gateway.accounts.passwords.hashesComputed == hashes + 1)
            let wrongAgain = try await confirm(server, "dora@example.org", code: wrong)
            #expect(wrongAgain.code == "invalid_code")
            let limited = try await confirm(server, "dora@example.org", code: wrong)
            #expect(limited.status == 429, "the third failure spent the limit: \(limited)")
        }
    }

    @Test func anExpiredCodeIsRefusedAndANewRequestReplacesTheOldCode() async throws {
        try await withMailingGateway { server, smtp in
            _ = try await server.emailAccount("dee@example.org")
            _ = try await recover(server, "dee@example.org")
            let first = try await smtp.code(sentTo: "dee@example.org")
            _ = try await recover(server, "dee@example.org")
            let second = try await smtp.code(sentTo: "dee@example.org", count: 2)
            if first != second {
                #expect(try await confirm(server, "dee@example.org", code: first).code == "invalid_code")
            }
            _ = try await server.database.admin.query(
                "update ferry.account_codes set expires_at = now() - interval '1 second'")
            #expect(try await confirm(server, "dee@example.org", code: second).code == "invalid_code")
            #expect(try await server.database.value("select count(*) from ferry.account_codes") == "0")
        }
    }

    @Test func theDatabaseKeepsOnlyTheCodesHash() async throws {
        try await withMailingGateway { server, smtp in
            _ = try await server.emailAccount("eve@example.org")
            _ = try await recover(server, "eve@example.org")
            let code = try await smtp.code(sentTo: "eve@example.org")
            try await eventually("the queue empties") {
                try await server.database.value("select count(*) from ferry.mail_queue") == "0"
            }
            #expect(
                try await server.database.value("select code_hash from ferry.account_codes") == OneTimeCode.hash(code))
            let dump = try await server.database.rows("select row_to_json(c)::text from ferry.account_codes c")
            #expect(!dump.description.contains(code))
        }
    }

    @Test func requestsAreLimitedPerEmailAndPerAddress() async throws {
        try await withMailingGateway(arguments: ["--recovery-requests-per-hour", "2"]) { server, _ in
            for _ in 0..<2 { #expect(try await recover(server, "fay@example.org").status == 202) }
            let limited = try await recover(server, "fay@example.org")
            #expect(limited.status == 429 && limited.header("Retry-After") != nil, "\(limited)")
            // Another email from the same address: the address's limit is spent too.
            #expect(try await recover(server, "gus@example.org").status == 429)
        }
    }

    @Test func aServerWithoutARelayAnswersNotFound() async throws {
        try await withAccountsGateway { server in
            let refused = try await recover(server, "ana@example.org")
            #expect(refused.status == 404 && refused.code == "not_found", "\(refused)")
        }
    }
}
