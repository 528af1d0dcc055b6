import Foundation

/// One mail as the relay receives it: a recipient, a subject and a plain-text body,
/// written as an RFC 5322 message (UTF-8, 8bit, CRLF line ends). libcurl adds the SMTP
/// dot-stuffing.
struct MailMessage: Sendable, Equatable {
    /// A normalised email address (``isDeliverable(_:)``).
    var recipient: String
    var subject: String
    var body: String

    /// Whether `address` can be written into an envelope and a `To:` header as it is:
    /// no character that ends an address or a header (`<`, `>`, `,`, quotes, spaces,
    /// controls). An address ``EmailAddress`` accepted may still hold one; such a mail is
    /// dropped, never sent with an altered recipient.
    static func isDeliverable(_ address: String) -> Bool {
        !address.isEmpty
            && address.unicodeScalars.allSatisfy { scalar in
                scalar.value > 0x20 && scalar.value != 0x7F && !"<>,;:\"\\()[]".unicodeScalars.contains(scalar)
            }
    }

    /// The bare address of a `From` setting written `Name <address>` or `address`.
    static func address(of from: String) -> String {
        guard let open = from.lastIndex(of: "<"), let close = from.lastIndex(of: ">"), open < close else {
            return from.trimmingCharacters(in: .whitespaces)
        }
        return String(from[from.index(after: open)..<close])
    }

    /// The whole message, headers and body, from `from`.
    func bytes(from: String, date: Date = Date()) -> [UInt8] {
        let domain = Self.address(of: from).split(separator: "@").last.map(String.init) ?? "localhost"
        let headers = [
            "From: \(Self.fromHeader(from))",
            "To: <\(recipient)>",
            "Subject: \(Self.headerText(subject))",
            "Date: \(Self.dateHeader(date))",
            "Message-ID: <\(UUID().uuidString.lowercased())@\(domain)>",
            "MIME-Version: 1.0",
            "Content-Type: text/plain; charset=utf-8",
            "Content-Transfer-Encoding: 8bit",
        ]
        let lines = body.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
        let text = headers.joined(separator: "\r\n") + "\r\n\r\n" + lines.joined(separator: "\r\n") + "\r\n"
        return Array(text.utf8)
    }

    /// A header value on one line: line breaks become spaces (a template or setting can
    /// never add a header), and text that is not ASCII is an RFC 2047 encoded word.
    static func headerText(_ text: String) -> String {
        let line = text.split(whereSeparator: \.isNewline).joined(separator: " ")
        guard line.unicodeScalars.contains(where: { !$0.isASCII }) else { return line }
        return "=?UTF-8?B?\(Data(line.utf8).base64EncodedString())?="
    }

    /// `Name <address>` with the name encoded when it is not ASCII, or the bare address.
    static func fromHeader(_ from: String) -> String {
        let address = address(of: from)
        guard let open = from.lastIndex(of: "<") else { return "<\(address)>" }
        let name = from[..<open].trimmingCharacters(in: .whitespaces)
        return name.isEmpty ? "<\(address)>" : "\(headerText(name)) <\(address)>"
    }

    /// RFC 5322's date, in UTC, with English names whatever the process's locale.
    static func dateHeader(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        let clock = String(format: "%02d:%02d:%02d", parts.tm_hour, parts.tm_min, parts.tm_sec)
        return
            "\(days[Int(parts.tm_wday)]), \(parts.tm_mday) \(months[Int(parts.tm_mon)]) \(1900 + parts.tm_year) \(clock) +0000"
    }
}
