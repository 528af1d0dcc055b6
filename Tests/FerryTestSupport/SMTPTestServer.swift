import Foundation
import Glibc

/// A real SMTP server for the mail tests: Debian's `python3-aiosmtpd` (`make deps`) on a
/// free loopback port, writing every mail it accepts into a Maildir of its own
/// (aiosmtpd's `Mailbox` handler). Tests point a gateway's `--smtp-url` at ``url`` and
/// read what arrived with ``mails()``, or wait for a code with ``code(sentTo:)``.
public final class SMTPTestServer: Sendable {
    /// `smtp://127.0.0.1:<port>`.
    public let url: String
    /// The port it listens on.
    public let port: Int
    /// The Maildir the mails go to (each a file under `new/`), for a client in another
    /// process (the Node tests) to read codes from.
    public var maildir: String { folder + "/maildir" }
    private let folder: String
    private let process: ChildProcess

    /// A mail as received: its headers and its body.
    public struct Mail: Sendable, CustomStringConvertible {
        /// The whole message as the server stored it.
        public let text: String

        /// The first value of header `name` (case-insensitive), unfolded.
        public func header(_ name: String) -> String? {
            for line in text.components(separatedBy: "\n") {
                let trimmed = line.trimmingCharacters(in: CharacterSet(charactersIn: "\r"))
                if trimmed.isEmpty { return nil }
                if trimmed.lowercased().hasPrefix(name.lowercased() + ":") {
                    return trimmed.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces)
                }
            }
            return nil
        }

        /// Everything after the headers.
        public var body: String {
            let normalized = text.replacingOccurrences(of: "\r\n", with: "\n")
            guard let end = normalized.range(of: "\n\n") else { return "" }
            return String(normalized[end.upperBound...])
        }

        /// The one-time code in the body: the first word of 6 to 8 letters and digits, in
        /// capitals, that is on a line of its own or follows "code:".
        public var code: String? {
            for line in body.components(separatedBy: "\n") {
                let words = line.split(whereSeparator: { $0 == " " || $0 == ":" }).map(String.init)
                for word in words.reversed()
                where (6...8).contains(word.count)
                    && word.unicodeScalars.allSatisfy({ ("A"..."Z").contains($0) || ("0"..."9").contains($0) })
                {
                    return word
                }
            }
            return nil
        }

        public var description: String { text }
    }

    /// Starts the server and waits until it accepts connections.
    public init() throws {
        port = try freePort()
        url = "smtp://127.0.0.1:\(port)"
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-smtp-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let python = FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") ? "/usr/bin/python3" : "python3"
        process = try ChildProcess(
            python,
            [
                "-m", "aiosmtpd", "-n", "-l", "127.0.0.1:\(port)", "-c", "aiosmtpd.handlers.Mailbox",
                folder + "/maildir",
            ],
            output: folder + "/server.log", errors: folder + "/server.log")
        try eventuallyBlocking("aiosmtpd listening on \(port) (is python3-aiosmtpd installed? make deps)") {
            acceptsConnections(onLoopbackPort: port)
        }
    }

    deinit {
        process.send(SIGTERM)
        _ = process.wait(seconds: 5)
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// Every mail received so far, oldest first.
    public func mails() -> [Mail] {
        let new = folder + "/maildir/new"
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: new) else { return [] }
        let paths = names.map { new + "/" + $0 }
        let dated = paths.compactMap { path -> (Date, String)? in
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
                let date = attributes[.modificationDate] as? Date,
                let text = try? String(contentsOfFile: path, encoding: .utf8)
            else { return nil }
            return (date, text)
        }
        return dated.sorted { $0.0 < $1.0 }.map { Mail(text: $0.1) }
    }

    /// The mails received for `recipient`.
    public func mails(to recipient: String) -> [Mail] {
        mails().filter { $0.header("To")?.lowercased().contains(recipient.lowercased()) == true }
    }

    /// Waits for the `count`th mail to `recipient` and returns it.
    public func mail(to recipient: String, count: Int = 1, seconds: Double = 30) async throws -> Mail {
        try await eventually("mail \(count) to \(recipient)", seconds: seconds) {
            let received = mails(to: recipient)
            return received.count >= count ? received[count - 1] : nil
        }
    }

    /// Waits for the `count`th mail to `recipient` and returns its code.
    public func code(sentTo recipient: String, count: Int = 1) async throws -> String {
        let mail = try await mail(to: recipient, count: count)
        guard let code = mail.code else { throw ChildProcessError(description: "no code in mail: \(mail)") }
        return code
    }
}
