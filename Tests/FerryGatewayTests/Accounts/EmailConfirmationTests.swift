import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// Email confirmation on link (PROTOCOL.md "Accounts", FERRY_EMAIL_CONFIRMATION), against
/// a real SMTP server (aiosmtpd): with `required`, link answers an unconfirmed user and
/// mails a code; the code confirms it, and only then can the email sign in; an
/// unconfirmed email blocks nobody, and whoever confirms it first owns it. With `off`
/// nothing changes, and every user object says whether its email is confirmed.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct EmailConfirmationTests {
    func withConfirmingGateway(_ body: (AccountsGateway, SMTPTestServer) async throws -> Void) async throws {
        let smtp = try SMTPTestServer()
        try await withAccountsGateway(arguments: ["--smtp-url", smtp.url, "--email-confirmation", "required"]) {
            server in try await body(server, smtp)
        }
    }

    func confirm(_ server: AccountsGateway, _ session: TestSession, code: String) async throws -> APIResponse {
        try await server.call("POST", "/v1/auth/confirm", token: session.accessToken, json: ["code": code])
    }

    func resend(_ server: AccountsGateway, _ session: TestSession) async throws -> APIResponse {
        try await server.call("POST", "/v1/auth/confirm/resend", token: session.accessToken)
    }

    /// A code of the alphabet that is not `code`.
    func wrong(_ code: String) -> String { code == "ZZZZ2345" ? "ZZZZ2346" : "ZZZZ2345" }

    @Test func theMailedCodeConfirmsTheEmailAndOnlyThenCanItSignIn() async throws {
        try await withConfirmingGateway { server, smtp in
            let phone = try await server.signUpAnonymous()
            #expect(try await server.me(phone.accessToken).value("user", "email_confirmed") as? Bool == false)
            let linked = try await server.link(phone, email: "Ana@Example.org", password: "correct horse battery")
            #expect(linked.status == 200, "\(linked)")
            #expect(linked.value("user", "email_confirmed") as? Bool == false)
            #expect(linked.value("user", "is_anonymous") as? Bool == false)
            #expect(try await server.me(phone.accessToken).value("user", "email_confirmed") as? Bool == false)

            let early = try await server.signIn(email: "ana@example.org", password: "correct horse battery")
            #expect(early.status == 403 && early.code == "email_not_confirmed", "\(early)")
            // A wrong password is still the usual answer: the 403 tells nothing to a guesser.
            let guessed = try await server.signIn(email: "ana@example.org", password: "wrong password!")
            #expect(guessed.status == 401 && guessed.code == "invalid_credentials", "\(guessed)")

            let mail = try await smtp.mail(to: "ana@example.org")
            #expect(mail.header("Subject") == "Confirm your email address")
            let code = try #require(mail.code, "no code in \(mail)")
            let refused = try await confirm(server, phone, code: wrong(code))
            #expect(refused.status == 400 && refused.code == "invalid_code", "\(refused)")
            let malformed = try await confirm(server, phone, code: "not a code")
            #expect(malformed.status == 400 && malformed.code == "invalid_code", "\(malformed)")

            let confirmed = try await confirm(server, phone, code: code.lowercased())
            #expect(confirmed.status == 200, "\(confirmed)")
            #expect(confirmed.string("user", "id") == phone.userID)
            #expect(confirmed.string("user", "email") == "ana@example.org")
            #expect(confirmed.value("user", "email_confirmed") as? Bool == true)
            // A retry after a lost answer is answered the same.
            #expect(try await confirm(server, phone, code: code).value("user", "email_confirmed") as? Bool == true)
            #expect(try await server.me(phone.accessToken).value("user", "email_confirmed") as? Bool == true)
            let refreshed = try await server.refresh(phone.refreshToken)
            #expect(refreshed.value("user", "email_confirmed") as? Bool == true, "\(refreshed)")

            let signedIn = try await server.signIn(email: "ana@example.org", password: "correct horse battery")
            #expect(signedIn.status == 200, "\(signedIn)")
            #expect(signedIn.string("user", "id") == phone.userID)
            #expect(signedIn.value("user", "email_confirmed") as? Bool == true)
        }
    }

    @Test func anUnconfirmedEmailBlocksNobodyAndTheFirstToConfirmOwnsIt() async throws {
        try await withConfirmingGateway { server, smtp in
            let squatter = try await server.signUpAnonymous()
            let owner = try await server.signUpAnonymous()
            #expect(
                try await server.link(squatter, email: "bo@example.org", password: "squatter password").status == 200)
            let squatterCode = try await smtp.code(sentTo: "bo@example.org")
            // Not email_in_use: the squatter has not confirmed it.
            let linked = try await server.link(owner, email: "BO@example.org", password: "owner's password")
            #expect(linked.status == 200, "\(linked)")
            let ownerCode = try await smtp.code(sentTo: "bo@example.org", count: 2)

            #expect(try await confirm(server, owner, code: ownerCode).status == 200)
            let late = try await confirm(server, squatter, code: squatterCode)
            #expect(late.status == 409 && late.code == "email_in_use", "\(late)")
            // The loser's link is undone: anonymous again, free to link another email.
            let me = try await server.me(squatter.accessToken)
            #expect(me.value("user", "is_anonymous") as? Bool == true, "\(me)")
            #expect(me.isNull("user", "email"))
            #expect(
                try await server.link(squatter, email: "bo@example.org", password: "squatter password").code
                    == "email_in_use")

            let signedIn = try await server.signIn(email: "bo@example.org", password: "owner's password")
            #expect(signedIn.status == 200 && signedIn.string("user", "id") == owner.userID, "\(signedIn)")
            let squatting = try await server.signIn(email: "bo@example.org", password: "squatter password")
            #expect(squatting.status == 401 && squatting.code == "invalid_credentials", "\(squatting)")
            #expect(
                try await server.database.value(
                    "select count(*) from ferry.users where lower(email) = 'bo@example.org'") == "1")
        }
    }

    @Test func concurrentConfirmationsOfOneEmailLeaveOneOwner() async throws {
        try await withConfirmingGateway { server, smtp in
            var sessions: [TestSession] = []
            for _ in 0..<4 {
                let session = try await server.signUpAnonymous()
                #expect(
                    try await server.link(session, email: "cleo@example.org", password: "a long password").status == 200
                )
                sessions.append(session)
            }
            _ = try await smtp.mail(to: "cleo@example.org", count: 4)
            // The mails name no account: a resend at a time tells whose each new code is.
            var codeOf: [String: String] = [:]
            for (index, session) in sessions.enumerated() {
                #expect(try await resend(server, session).status == 202)
                codeOf[session.userID] = try await smtp.code(sentTo: "cleo@example.org", count: 5 + index)
            }
            let answers = try await withThrowingTaskGroup(of: Int.self) { group in
                for session in sessions {
                    let code = codeOf[session.userID]!
                    group.addTask { try await confirm(server, session, code: code).status }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(answers.sorted() == [200, 409, 409, 409], "\(answers)")
            #expect(
                try await server.database.value(
                    "select count(*) from ferry.users where email = 'cleo@example.org' and email_confirmed") == "1")
        }
    }

    @Test func resendMailsANewCodeThatReplacesTheOld() async throws {
        try await withConfirmingGateway { server, smtp in
            let phone = try await server.signUpAnonymous()
            #expect(try await resend(server, phone).code == "forbidden")
            #expect(try await confirm(server, phone, code: "ABCD2345").code == "forbidden")
            #expect(try await server.link(phone, email: "dee@example.org", password: "a long password").status == 200)
            let first = try await smtp.code(sentTo: "dee@example.org")
            let resent = try await resend(server, phone)
            #expect(resent.status == 202, "\(resent)")
            let second = try await smtp.code(sentTo: "dee@example.org", count: 2)
            if first != second {
                #expect(try await confirm(server, phone, code: first).code == "invalid_code")
            }
            #expect(try await confirm(server, phone, code: second).status == 200)
            // Confirmed: nothing more to send.
            #expect(try await resend(server, phone).status == 202)
            try await Task.sleep(for: .milliseconds(300))
            #expect(smtp.mails(to: "dee@example.org").count == 2)
        }
    }

    @Test func theFifthWrongCodeVoidsTheConfirmationCode() async throws {
        try await withConfirmingGateway { server, smtp in
            let phone = try await server.signUpAnonymous()
            #expect(try await server.link(phone, email: "eve@example.org", password: "a long password").status == 200)
            let code = try await smtp.code(sentTo: "eve@example.org")
            for _ in 0..<5 { #expect(try await confirm(server, phone, code: wrong(code)).code == "invalid_code") }
            #expect(try await confirm(server, phone, code: code).code == "invalid_code")
            #expect(try await server.database.value("select count(*) from ferry.account_codes") == "0")
        }
    }

    @Test func withConfirmationOffLinkedEmailsAreConfirmedAtOnce() async throws {
        try await withAccountsGateway { server in
            let phone = try await server.signUpAnonymous()
            let linked = try await server.link(phone, email: "fay@example.org", password: "a long password")
            #expect(linked.status == 200 && linked.value("user", "email_confirmed") as? Bool == true, "\(linked)")
            let signedIn = try await server.signIn(email: "fay@example.org", password: "a long password")
            #expect(signedIn.status == 200 && signedIn.value("user", "email_confirmed") as? Bool == true)
            #expect(
                try await confirm(server, phone, code: "ABCD2345").value("user", "email_confirmed") as? Bool == true)
            #expect(try await server.database.value("select count(*) from ferry.mail_queue") == "0")
            let other = try await server.signUpAnonymous()
            #expect(
                try await server.link(other, email: "FAY@example.org", password: "a long password").code
                    == "email_in_use")
            #expect(try await resend(server, phone).code == "not_found")
        }
    }

    @Test func requiredWithoutAnSMTPRelayIsAConfigurationError() throws {
        #expect(throws: (any Error).self) {
            try TestGateway.configuration(
                databaseURL: "postgresql://x@127.0.0.1/x", arguments: ["--email-confirmation", "required"])
        }
        #expect(throws: (any Error).self) {
            try TestGateway.configuration(
                databaseURL: "postgresql://x@127.0.0.1/x", arguments: ["--email-confirmation", "maybe"])
        }
        let off = try TestGateway.configuration(databaseURL: "postgresql://x@127.0.0.1/x")
        #expect(!off.requiresEmailConfirmation)
    }
}
