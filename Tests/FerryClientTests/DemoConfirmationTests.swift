import FerryTestSupport
import Foundation
import Testing

/// Email confirmation through ferry-demo processes (FerryClient's `confirmEmail` and
/// `resendConfirmation`) against a real gateway with FERRY_EMAIL_CONFIRMATION=required
/// that mails through a real SMTP server (aiosmtpd).
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct DemoConfirmationTests {
    @Test func theMailedCodeConfirmsTheLinkedEmailThenItSignsIn() async throws {
        let smtp = try SMTPTestServer()
        let environment = ["FERRY_SMTP_URL": smtp.url, "FERRY_EMAIL_CONFIRMATION": "required"]
        try await DemoGateway.with(environment: environment) { gateway in
            let phone = gateway.device("phone")
            let tablet = gateway.device("tablet")
            try await gateway.demoJSON(phone, "link", "cy@example.com", "correct horse")
            var status = try await gateway.status(phone)
            #expect(status["anonymous"] as? Bool == false && status["email_confirmed"] as? Bool == false, "\(status)")
            let early = try await gateway.demo(tablet, "signin", "cy@example.com", "correct horse")
            #expect(early.status == 1 && early.errors.contains("email_not_confirmed"), "\(early.errors)")

            try await gateway.demoJSON(phone, "confirm", "--resend")
            let code = try await smtp.code(sentTo: "cy@example.com", count: 2)
            let bad = try await gateway.demo(phone, "confirm", code == "ZZZZ2345" ? "ZZZZ2346" : "ZZZZ2345")
            #expect(bad.status == 1 && bad.errors.contains("invalid_code"), "\(bad.errors)")
            try await gateway.demoJSON(phone, "confirm", code)
            status = try await gateway.status(phone)
            #expect(status["email_confirmed"] as? Bool == true, "\(status)")
            try await gateway.demoJSON(tablet, "signin", "cy@example.com", "correct horse")
            #expect(try await gateway.status(tablet)["email_confirmed"] as? Bool == true)
            #expect(try await gateway.status(tablet)["user_id"] as? String == status["user_id"] as? String)
        }
    }

    @Test func withConfirmationOffALinkedEmailIsConfirmed() async throws {
        try await DemoGateway.with { gateway in
            let phone = gateway.device("phone")
            #expect(try await gateway.status(phone)["email_confirmed"] as? Bool == false)
            try await gateway.demoJSON(phone, "link", "di@example.com", "correct horse")
            #expect(try await gateway.status(phone)["email_confirmed"] as? Bool == true)
        }
    }
}
