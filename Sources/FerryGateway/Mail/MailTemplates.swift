import Foundation

/// The mails Ferry sends, one template per kind, each a subject line and a body with
/// `{{code}}`, `{{minutes}}` and `{{email}}` in them. Built in, and replaceable by the
/// operator: `FERRY_MAIL_TEMPLATES` names a folder whose `recovery.txt` and
/// `confirmation.txt`, where present, replace the built-in ones. A file's first line is
/// `Subject: …`, then an empty line, then the body.
struct MailTemplates: Sendable, Equatable {
    /// What a mail is for: the `kind` of its row in `ferry.mail_queue`.
    enum Kind: String, Sendable, CaseIterable {
        /// A password reset's code (`POST /v1/auth/recover`).
        case recovery
        /// An email confirmation's code (link, `POST /v1/auth/confirm/resend`).
        case confirmation
    }

    /// One kind's subject and body, placeholders still in them.
    struct Template: Sendable, Equatable {
        var subject: String
        var body: String
    }

    private(set) var templates: [Kind: Template]

    /// The built-in templates.
    static let builtIn = MailTemplates(templates: [
        .recovery: Template(
            subject: "Your password reset code",
            body: """
                Someone asked to reset the password of the account {{email}}.

                Your code: {{code}}

                It works once, for {{minutes}} minutes. If you did not ask, ignore this mail:
                your password stays as it is.
                """),
        .confirmation: Template(
            subject: "Confirm your email address",
            body: """
                Confirm that {{email}} is yours with this code:

                {{code}}

                It works once, for {{minutes}} minutes. If you did not ask, ignore this mail.
                """),
    ])

    /// The built-in templates with those of `folder` in place of theirs; an unreadable
    /// file, or one without a subject line or a `{{code}}`, is an error naming it.
    static func load(folder: String?) throws(TemplateError) -> MailTemplates {
        var loaded = builtIn
        guard let folder else { return loaded }
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder, isDirectory: &isFolder), isFolder.boolValue else {
            throw TemplateError(description: "\(folder) is not a folder")
        }
        for kind in Kind.allCases {
            let path = (folder as NSString).appendingPathComponent("\(kind.rawValue).txt")
            guard FileManager.default.fileExists(atPath: path) else { continue }
            guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8)
            else { throw TemplateError(description: "\(path) cannot be read as UTF-8") }
            loaded.templates[kind] = try parse(text, path: path)
        }
        return loaded
    }

    private static func parse(_ text: String, path: String) throws(TemplateError) -> Template {
        let lines = text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
        guard let first = lines.first, first.hasPrefix("Subject:") else {
            throw TemplateError(description: "\(path): the first line must be Subject: …")
        }
        let subject = first.dropFirst("Subject:".count).trimmingCharacters(in: .whitespaces)
        let body = lines.dropFirst().drop { $0.trimmingCharacters(in: .whitespaces).isEmpty }.joined(separator: "\n")
        guard (subject + body).contains("{{code}}") else {
            throw TemplateError(description: "\(path): the mail must contain {{code}}")
        }
        return Template(subject: subject, body: body)
    }

    /// The mail of `kind` to `recipient` with its values filled in.
    func message(_ kind: Kind, to recipient: String, code: String, minutes: Int) -> MailMessage {
        let template = templates[kind]!
        let fill = { (text: String) in
            text.replacingOccurrences(of: "{{code}}", with: code)
                .replacingOccurrences(of: "{{minutes}}", with: String(minutes))
                .replacingOccurrences(of: "{{email}}", with: recipient)
        }
        return MailMessage(recipient: recipient, subject: fill(template.subject), body: fill(template.body))
    }

    /// A template folder's problem, naming the file.
    struct TemplateError: Error, CustomStringConvertible {
        let description: String
    }
}
