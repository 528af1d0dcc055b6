import FerryPostgres

// The mail sender's calls (sql/ferry/functions/mail_queue.sql), as the gateway's own role.

/// `ferry.claim_mail`: the due mails this sender sends now, each leased to it.
struct ClaimMail: DatabaseQuery {
    static let preparedName: String? = "ferry_claim_mail"
    static let sql = "select id, kind, recipient, code, valid_minutes, attempts from ferry.claim_mail($1, $2)"
    static let columns = ["id", "kind", "recipient", "code", "valid_minutes", "attempts"]

    /// At most this many mails.
    var batchSize: Int
    /// Seconds no other sender may take them.
    var leaseSeconds: Int
    var parameters: [String?] { [String(batchSize), String(leaseSeconds)] }

    /// One mail to send.
    struct Mail: QueryRowDecodable, Sendable {
        var id: Int
        /// A ``MailTemplates/Kind``'s raw value.
        var kind: String
        var recipient: String
        var code: String
        var validMinutes: Int
        /// Sends tried, this one included.
        var attempts: Int

        init(_ row: QueryRow) throws(QueryShapeError) {
            id = try row.decode("id")
            kind = try row.decode("kind")
            recipient = try row.decode("recipient")
            code = try row.decode("code")
            validMinutes = try row.decode("valid_minutes")
            attempts = try row.decode("attempts")
        }
    }

    static func answer(from rows: QueryRows) throws(QueryShapeError) -> [Mail] {
        var mails: [Mail] = []
        for row in rows.all { mails.append(try Mail(row)) }
        return mails
    }
}

/// `ferry.mail_sent`: the relay took a mail; it leaves the queue.
struct MailSent: DatabaseQuery {
    static let preparedName: String? = "ferry_mail_sent"
    static let sql = "select true as recorded from ferry.mail_sent($1)"
    static let columns = ["recorded"]

    var id: Int
    var parameters: [String?] { [String(id)] }

    static func answer(from rows: QueryRows) throws(QueryShapeError) {}
}

/// `ferry.mail_failed`: a send failed; the mail is due again after a backoff.
struct MailFailed: DatabaseQuery {
    static let preparedName: String? = "ferry_mail_failed"
    static let sql = "select true as recorded from ferry.mail_failed($1, $2)"
    static let columns = ["recorded"]

    var id: Int
    /// Why, for `last_error` (never the relay's URL).
    var error: String
    var parameters: [String?] { [String(id), error] }

    static func answer(from rows: QueryRows) throws(QueryShapeError) {}
}
