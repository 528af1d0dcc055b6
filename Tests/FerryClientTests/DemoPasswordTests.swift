import FerryTestSupport
import Foundation
import Testing

/// Password change and reset through ferry-demo processes (FerryClient's
/// `changePassword`, `requestPasswordReset`, `resetPassword`) against a real gateway that
/// mails through a real SMTP server (aiosmtpd).
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct DemoPasswordTests {
    @Test func aChangeKeepsThisDeviceSignedInAndSignsTheOthersOut() async throws {
        try await DemoGateway.with { gateway in
            let phone = gateway.device("phone")
            let tablet = gateway.device("tablet")
            try await gateway.demoJSON(phone, "enqueue", "tasks", "upsert", #"{"id": "t-1", "title": "one"}"#)
            try await gateway.demoJSON(phone, "link", "ana@example.com", "correct horse")
            try await gateway.demoJSON(phone, "sync")
            try await gateway.demoJSON(tablet, "signin", "ana@example.com", "correct horse")
            let ana = try #require(try await gateway.status(phone)["user_id"] as? String)

            let wrong = try await gateway.demo(phone, "password", "not the password", "battery staple")
            #expect(wrong.status == 1 && wrong.errors.contains("invalid_credentials"), "\(wrong.errors)")
            try await gateway.demoJSON(phone, "password", "correct horse", "battery staple")
            #expect(try await gateway.status(phone)["user_id"] as? String == ana)
            try await gateway.demoJSON(phone, "enqueue", "tasks", "upsert", #"{"id": "t-2", "title": "two"}"#)
            try await gateway.demoJSON(phone, "sync")
            // Every session but the phone's new one is revoked: the tablet must sign in again.
            let open = try await gateway.rows(
                "select device_id from ferry.sessions where user_id = $1 and revoked_at is null", [ana])
            #expect(open.count == 1)
            #expect(try await gateway.demo(tablet, "sync").status != 0)
            #expect(try await gateway.demo(tablet, "signin", "ana@example.com", "correct horse").status == 1)
            try await gateway.demoJSON(tablet, "signin", "ana@example.com", "battery staple")
            #expect(try await gateway.status(tablet)["user_id"] as? String == ana)
        }
    }

    @Test func aResetByMailedCodeSignsInTheDeviceThatHoldsTheAccount() async throws {
        let smtp = try SMTPTestServer()
        try await DemoGateway.with(environment: ["FERRY_SMTP_URL": smtp.url]) { gateway in
            let phone = gateway.device("phone")
            let laptop = gateway.device("laptop")
            try await gateway.demoJSON(phone, "link", "bo@example.com", "forgotten horse")
            let bo = try #require(try await gateway.status(phone)["user_id"] as? String)

            // A device that holds another (anonymous) account resets the password, then signs in.
            try await gateway.demoJSON(laptop, "reset-request", "bo@example.com")
            let first = try await smtp.code(sentTo: "bo@example.com")
            let bad = try await gateway.demo(laptop, "reset", "bo@example.com", "ZZZZ2345", "new horse one")
            #expect(bad.status == 1 && bad.errors.contains("invalid_code"), "\(bad.errors)")
            let other = try await gateway.demoJSON(laptop, "reset", "bo@example.com", first, "new horse one")
            #expect((other as? [String: Any])?["signed_in"] as? Bool == false)
            #expect(try await gateway.status(laptop)["anonymous"] as? Bool == true)
            try await gateway.demoJSON(laptop, "signin", "bo@example.com", "new horse one")
            #expect(try await gateway.status(laptop)["user_id"] as? String == bo)

            // The device that holds the account carries on with the answer's session.
            try await gateway.demoJSON(laptop, "reset-request", "bo@example.com")
            let second = try await smtp.code(sentTo: "bo@example.com", count: 2)
            let same = try await gateway.demoJSON(laptop, "reset", "bo@example.com", second, "new horse two")
            #expect((same as? [String: Any])?["signed_in"] as? Bool == true)
            #expect(try await gateway.status(laptop)["email"] as? String == "bo@example.com")
            try await gateway.demoJSON(laptop, "sync")
            // The phone's session ended with the first reset.
            #expect(try await gateway.demo(phone, "sync").status != 0)
        }
    }
}
