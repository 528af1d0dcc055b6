import FerryPostgres

// The email confirmation functions of sql/ferry/functions/email_confirmation.sql, run as
// the caller.

/// `ferry.confirm_email`: confirms the caller's email with the code mailed to it.
struct ConfirmEmail: SingleRowQuery {
    static let preparedName: String? = "ferry_confirm_email"
    static let sql = "select status, email from ferry.confirm_email($1)"
    static let columns = ["status", "email"]

    var codeHash: String
    var parameters: [String?] { [codeHash] }

    enum Answer: QueryRowDecodable {
        /// Confirmed now, or before (a retry after a lost answer).
        case confirmed(email: String)
        /// No live code matches (a wrong one counts against the code).
        case invalidCode
        /// Another account confirmed this email first; the caller's link is undone.
        case emailInUse
        /// The caller has no email to confirm.
        case anonymous
        /// The caller's session is no longer open.
        case revoked

        init(_ row: QueryRow) throws(QueryShapeError) {
            switch try row.decode("status", as: String.self) {
            case "ok": self = .confirmed(email: try row.decode("email"))
            case "invalid_code": self = .invalidCode
            case "email_in_use": self = .emailInUse
            case "anonymous": self = .anonymous
            default: self = .revoked
            }
        }
    }
}

/// `ferry.resend_confirmation`: a new code for the caller's unconfirmed email, mailed.
struct ResendConfirmation: SingleRowQuery {
    static let preparedName: String? = "ferry_resend_confirmation"
    static let sql = "select ferry.resend_confirmation($1, $2, $3) as status"
    static let columns = ["status"]

    var code: MailedCode
    var parameters: [String?] { [code.hash, code.code, String(code.validMinutes)] }

    enum Answer: QueryRowDecodable {
        /// Queued; or nothing to send, the email being confirmed already.
        case sent
        /// The caller has no email to confirm.
        case anonymous
        /// The caller's session is no longer open.
        case revoked

        init(_ row: QueryRow) throws(QueryShapeError) {
            switch try row.decodeIfPresent("status", as: String.self) {
            case "ok", "confirmed": self = .sent
            case "anonymous": self = .anonymous
            default: self = .revoked
            }
        }
    }
}
