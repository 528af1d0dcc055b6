import FerryPostgres
import Foundation

// The password functions of sql/ferry/functions/account_recovery.sql: a change runs as
// the caller; a reset, which has no caller, as the gateway.

/// `ferry.caller_credentials`: the caller's email and password hash (a change's first step).
struct CallerCredentials: SingleRowQuery {
    static let preparedName: String? = "ferry_caller_credentials"
    static let sql = "select status, email, password_hash from ferry.caller_credentials()"
    static let columns = ["status", "email", "password_hash"]

    var parameters: [String?] { [] }

    enum Answer: QueryRowDecodable {
        case found(email: String, passwordHash: String)
        /// The caller has no email, so no password.
        case anonymous
        /// The caller's session is no longer open.
        case revoked

        init(_ row: QueryRow) throws(QueryShapeError) {
            switch try row.decode("status", as: String.self) {
            case "ok": self = .found(email: try row.decode("email"), passwordHash: try row.decode("password_hash"))
            case "anonymous": self = .anonymous
            default: self = .revoked
            }
        }
    }
}

/// `ferry.change_password`: the new password and session, once the current one checked out.
struct ChangePassword: SingleRowQuery {
    static let preparedName: String? = "ferry_change_password"
    static let sql = "select status, session_id, email, email_confirmed from ferry.change_password($1, $2, $3)"
    static let columns = ["status", "session_id", "email", "email_confirmed"]

    /// The hash the current password was checked against.
    var checkedHash: String
    var newHash: String
    var refreshTokenHash: String
    var parameters: [String?] { [checkedHash, newHash, refreshTokenHash] }

    enum Answer: QueryRowDecodable {
        /// Changed: the device's new session; every other one is ended.
        case changed(sessionID: UUID, email: String, emailConfirmed: Bool)
        /// The password changed since it was checked: nothing done.
        case passwordChanged
        /// The caller's session is no longer open.
        case revoked

        init(_ row: QueryRow) throws(QueryShapeError) {
            switch try row.decode("status", as: String.self) {
            case "ok":
                self = .changed(
                    sessionID: try row.decode("session_id"), email: try row.decode("email"),
                    emailConfirmed: try row.decodeIfPresent("email_confirmed") ?? false)
            case "changed": self = .passwordChanged
            default: self = .revoked
            }
        }
    }
}

/// `ferry.request_password_reset`: a reset code for the email's account, mailed (or
/// nothing, when no account has the email).
struct RequestPasswordReset: DatabaseQuery {
    static let preparedName: String? = "ferry_request_password_reset"
    static let sql = "select true as requested from ferry.request_password_reset($1, $2, $3, $4)"
    static let columns = ["requested"]

    /// The email, normalised.
    var email: String
    var codeHash: String
    /// The code itself, for the mail.
    var code: String
    var validMinutes: Int
    var parameters: [String?] { [email, codeHash, code, String(validMinutes)] }

    static func answer(from rows: QueryRows) throws(QueryShapeError) {}
}

/// `ferry.check_reset_code`: whether a reset code is the email's live one, before the new
/// password is hashed (a wrong one counts against the code).
struct CheckResetCode: SingleRowQuery {
    static let preparedName: String? = "ferry_check_reset_code"
    static let sql = "select ferry.check_reset_code($1, $2) as matches"
    static let columns = ["matches"]

    /// The email, normalised.
    var email: String
    var codeHash: String
    var parameters: [String?] { [email, codeHash] }

    struct Answer: QueryRowDecodable {
        var matches: Bool
        init(_ row: QueryRow) throws(QueryShapeError) { matches = try row.decode("matches") }
    }
}

/// `ferry.reset_password`: with the right code, the new password and a new session.
struct ResetPassword: SingleRowQuery {
    static let preparedName: String? = "ferry_reset_password"
    static let sql = "select status, user_id, session_id, email from ferry.reset_password($1, $2, $3, $4, $5)"
    static let columns = ["status", "user_id", "session_id", "email"]

    /// The email, normalised.
    var email: String
    var codeHash: String
    var newHash: String
    var deviceID: String
    var refreshTokenHash: String
    var parameters: [String?] { [email, codeHash, newHash, deviceID, refreshTokenHash] }

    enum Answer: QueryRowDecodable {
        /// Reset: the account, its email and the device's new session.
        case reset(userID: UUID, sessionID: UUID, email: String)
        /// No live code matches.
        case invalidCode

        init(_ row: QueryRow) throws(QueryShapeError) {
            guard try row.decode("status", as: String.self) == "ok" else {
                self = .invalidCode
                return
            }
            self = .reset(
                userID: try row.decode("user_id"), sessionID: try row.decode("session_id"),
                email: try row.decode("email"))
        }
    }
}
