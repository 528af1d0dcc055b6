import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// The mail queue and its sender (0011_mail_and_codes.sql, mail_queue.sql, MailSender)
/// against a real SMTP server (aiosmtpd): a queued mail arrives once and leaves the
/// queue, a relay that is down leaves it queued with a backoff and it goes out later,
/// two gateways on one database send each mail once, the operator's templates replace
/// the built-in ones, and an expired code is never mailed.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct MailQueueTests {
    /// Queues a recovery mail to `recipient` carrying `code`, as an account function does.
    func enqueue(_ database: AccountsDatabase, to recipient: String, code: String, minutes: Int = 15) async throws {
        _ = try await database.admin.query(
            "select ferry.enqueue_mail('recovery', $1, $2, $3)", [recipient, code, String(minutes)])
    }

    func queued(_ database: AccountsDatabase) async throws -> Int {
        try #require(Int(try await database.value("select count(*) from ferry.mail_queue") ?? ""))
    }

    @Test func aQueuedMailArrivesWithItsCodeAndLeavesTheQueue() async throws {
        let smtp = try SMTPTestServer()
        try await withAccountsGateway(arguments: ["--smtp-url", smtp.url, "--mail-from", "Ferry <ferry@example.org>"]) {
            server in
            try await enqueue(server.database, to: "ana@example.org", code: "K7P2QX9M")
            let mail = try await smtp.mail(to: "ana@example.org")
            #expect(mail.code == "K7P2QX9M")
            #expect(mail.body.contains("15 minutes"))
            #expect(mail.header("Subject") == "Your password reset code")
            #expect(mail.header("From") == "Ferry <ferry@example.org>")
            try await eventually("the sent mail leaves the queue") { try await queued(server.database) == 0 }
        }
    }

    @Test func aRelayThatIsDownLeavesTheMailQueuedWithABackoffUntilItIsBack() async throws {
        try await AccountsDatabase.with { database in
            try await withClosedPort { closed in
                try await withStartedGateway(
                    databaseURL: database.gatewayURL, arguments: ["--smtp-url", "smtp://127.0.0.1:\(closed)"]
                ) {
                    _, _ in
                    try await enqueue(database, to: "bo@example.org", code: "R4T6Y8U2")
                    try await eventually("a failed attempt recorded") {
                        try await database.value(
                            "select last_error is not null and attempts >= 1 from ferry.mail_queue") == "t"
                    }
                    // The backoff puts the next attempt in the future; the code stays queued.
                    #expect(try await database.value("select next_attempt_at > now() from ferry.mail_queue") == "t")
                }
            }
            let smtp = try SMTPTestServer()
            try await withStartedGateway(databaseURL: database.gatewayURL, arguments: ["--smtp-url", smtp.url]) {
                _, _ in
                _ = try await database.admin.query("update ferry.mail_queue set next_attempt_at = now()")
                #expect(try await smtp.mail(to: "bo@example.org").code == "R4T6Y8U2")
                try await eventually("the sent mail leaves the queue") { try await queued(database) == 0 }
            }
        }
    }

    @Test func twoGatewaysOnOneDatabaseSendEachMailOnce() async throws {
        let smtp = try SMTPTestServer()
        try await AccountsDatabase.with { database in
            let arguments = ["--smtp-url", smtp.url]
            try await withStartedGateway(databaseURL: database.gatewayURL, arguments: arguments) { _, _ in
                try await withStartedGateway(databaseURL: database.gatewayURL, arguments: arguments) { _, _ in
                    let recipients = (1...30).map { "user\($0)@example.org" }
                    for recipient in recipients { try await enqueue(database, to: recipient, code: "ONCE2345") }
                    try await eventually("every mail sent", seconds: 60) { try await queued(database) == 0 }
                    try await eventually("every mail received") { smtp.mails().count >= recipients.count }
                    // Settled: nothing sent twice arrives late.
                    try await Task.sleep(for: .seconds(1))
                    #expect(smtp.mails().count == recipients.count)
                    for recipient in recipients { #expect(smtp.mails(to: recipient).count == 1, "\(recipient)") }
                }
            }
        }
    }

    @Test func theOperatorsTemplatesReplaceTheBuiltInOnes() async throws {
        let smtp = try SMTPTestServer()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-templates-\(UUID())").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try "Subject: Réinitialiser le mot de passe\n\nVotre code : {{code}} ({{minutes}} min) pour {{email}}\n"
            .write(toFile: folder + "/recovery.txt", atomically: true, encoding: .utf8)
        try await withAccountsGateway(arguments: ["--smtp-url", smtp.url, "--mail-templates", folder]) { server in
            try await enqueue(server.database, to: "cleo@example.org", code: "Z9X8C7V6")
            let mail = try await smtp.mail(to: "cleo@example.org")
            #expect(mail.body.contains("Votre code : Z9X8C7V6 (15 min) pour cleo@example.org"))
            // Not ASCII: an RFC 2047 encoded word, so the header stays one line of ASCII.
            #expect(mail.header("Subject")?.hasPrefix("=?UTF-8?B?") == true)
        }
    }

    @Test func aMailWhoseCodeExpiredIsNeverSent() async throws {
        let smtp = try SMTPTestServer()
        try await AccountsDatabase.with { database in
            try await enqueue(database, to: "old@example.org", code: "OLDC0DE1")
            _ = try await database.admin.query("update ferry.mail_queue set expires_at = now() - interval '1 second'")
            try await enqueue(database, to: "new@example.org", code: "NEWC0DE1")
            try await withStartedGateway(databaseURL: database.gatewayURL, arguments: ["--smtp-url", smtp.url]) {
                _, _ in
                #expect(try await smtp.mail(to: "new@example.org").code == "NEWC0DE1")
                try await eventually("the queue empties") { try await queued(database) == 0 }
                #expect(smtp.mails(to: "old@example.org").isEmpty)
            }
        }
    }
}
