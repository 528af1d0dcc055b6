import Foundation
import Testing

@testable import FerryGateway

/// Mail as written for the relay (MailMessage) and the operator's templates
/// (MailTemplates): no header can be added through a value, text that is not ASCII is
/// encoded, and a template folder is checked at start.
@Suite struct MailMessageTests {
    @Test func aLineBreakInASubjectNeverStartsAHeader() {
        let message = MailMessage(recipient: "ana@example.org", subject: "hi\r\nBcc: eve@example.org", body: "x")
        let text = String(decoding: message.bytes(from: "ferry@example.org"), as: UTF8.self)
        let headers = text.components(separatedBy: "\r\n\r\n")[0].components(separatedBy: "\r\n")
        #expect(headers.contains("Subject: hi Bcc: eve@example.org"))
        #expect(!headers.contains { $0.hasPrefix("Bcc:") })
    }

    @Test func anAddressThatWouldEndTheEnvelopeIsNotDeliverable() {
        #expect(MailMessage.isDeliverable("ana@example.org"))
        for address in ["a>b@example.org", "a,b@example.org", "a b@example.org", "a\"b@example.org", ""] {
            #expect(!MailMessage.isDeliverable(address), "\(address)")
        }
    }

    @Test func bodyLinesEndInCRLFAndTheSenderNameIsEncodedWhenNotASCII() {
        let message = MailMessage(recipient: "ana@example.org", subject: "s", body: "one\ntwo")
        let text = String(decoding: message.bytes(from: "Fërry <f@example.org>"), as: UTF8.self)
        #expect(text.hasSuffix("\r\n\r\none\r\ntwo\r\n"))
        #expect(text.contains("From: =?UTF-8?B?\(Data("Fërry".utf8).base64EncodedString())?= <f@example.org>\r\n"))
        #expect(MailMessage.dateHeader(Date(timeIntervalSince1970: 0)) == "Thu, 1 Jan 1970 00:00:00 +0000")
    }

    @Test func aTemplateFolderIsCheckedAtStart() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-templates-\(UUID())").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        #expect(try MailTemplates.load(folder: folder) == MailTemplates.builtIn)
        try "no subject line\n\n{{code}}".write(toFile: folder + "/recovery.txt", atomically: true, encoding: .utf8)
        #expect(throws: MailTemplates.TemplateError.self) { try MailTemplates.load(folder: folder) }
        try "Subject: s\n\nno code here".write(toFile: folder + "/recovery.txt", atomically: true, encoding: .utf8)
        #expect(throws: MailTemplates.TemplateError.self) { try MailTemplates.load(folder: folder) }
        try "Subject: Code {{code}}\n\nHello {{email}}".write(
            toFile: folder + "/confirmation.txt", atomically: true, encoding: .utf8)
        try "Subject: s\n\n{{code}}".write(toFile: folder + "/recovery.txt", atomically: true, encoding: .utf8)
        let loaded = try MailTemplates.load(folder: folder)
        let mail = loaded.message(.confirmation, to: "ana@example.org", code: "ABC123", minutes: 15)
        #expect(mail.subject == "Code ABC123" && mail.body == "Hello ana@example.org")
        #expect(throws: MailTemplates.TemplateError.self) { try MailTemplates.load(folder: folder + "/missing") }
    }
}
