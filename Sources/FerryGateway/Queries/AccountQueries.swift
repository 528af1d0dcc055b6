import FerryAuth
import FerryPostgres
import Foundation

// The account functions of sql/ferry/functions/accounts.sql. The first seven run as the
// gateway (no caller yet, or none needed); the others as the caller.

/// `ferry.sign_up_anonymous`: a new anonymous user and its first session.
struct SignUpAnonymous: SingleRowQuery {
    static let preparedName: String? = "ferry_sign_up_anonymous"
    static let sql = "select user_id, session_id from ferry.sign_up_anonymous($1, $2)"
    static let columns = ["user_id", "session_id"]

    var deviceID: String
    var refreshTokenHash: String
    var parameters: [String?] { [deviceID, refreshTokenHash] }

    struct Answer: QueryRowDecodable {
        var userID: UUID
        var sessionID: UUID

        init(_ row: QueryRow) throws(QueryShapeError) {
            userID = try row.decode("user_id")
            sessionID = try row.decode("session_id")
        }
    }
}

/// `ferry.refresh_session`: rotates a refresh token, answers a retry within the grace
/// window, or says why not.
struct RefreshSession: SingleRowQuery {
    static let preparedName: String? = "ferry_refresh_session"
    static let sql = """
        select status, user_id, session_id, device_id, email, sealed, email_confirmed
        from ferry.refresh_session($1, $2, $3, $4, make_interval(secs => $5))
        """
    static let columns = ["status", "user_id", "session_id", "device_id", "email", "sealed", "email_confirmed"]

    /// The rotation of the token presented: its hash, its chain's, its successor's.
    var rotation: RefreshRotation
    /// How long a rotated token is answered with its successor again, seconds.
    var graceSeconds: Int
    var parameters: [String?] {
        [
            rotation.presentedHash, rotation.chainHash, rotation.successorHash, rotation.sealedSuccessor,
            String(graceSeconds),
        ]
    }

    enum Answer: QueryRowDecodable {
        /// Rotated (to this query's successor; `sealed` nil), or the token rotated last
        /// presented again within the window (`sealed`: the successor it was rotated to): the
        /// session's user, session and device, and the user's email (nil: anonymous) and
        /// whether it is confirmed.
        case rotated(
            userID: UUID, sessionID: UUID, deviceID: String, email: String?, emailConfirmed: Bool, sealed: String?)
        /// A token used before: the database revoked its session (nil when it has none).
        case reused(sessionID: UUID?)
        /// The token's session was revoked.
        case revoked
        /// No such token (or a status this version does not know).
        case invalid

        init(_ row: QueryRow) throws(QueryShapeError) {
            switch try row.decode("status", as: String.self) {
            case let status where status == "ok" || status == "grace":
                self = .rotated(
                    userID: try row.decode("user_id"), sessionID: try row.decode("session_id"),
                    deviceID: try row.decode("device_id"), email: try row.decodeIfPresent("email"),
                    emailConfirmed: try row.decodeIfPresent("email_confirmed") ?? false,
                    sealed: status == "grace" ? try row.decode("sealed") : nil)
            case "reused": self = .reused(sessionID: try row.decodeIfPresent("session_id"))
            case "revoked": self = .revoked
            default: self = .invalid
            }
        }
    }
}

/// `ferry.find_credentials`: sign-in's first step, the account an email names.
struct FindCredentials: DatabaseQuery {
    static let preparedName: String? = "ferry_find_credentials"
    static let sql = "select user_id, password_hash, email_confirmed from ferry.find_credentials($1)"
    static let columns = ["user_id", "password_hash", "email_confirmed"]

    /// The email, normalised.
    var email: String
    var parameters: [String?] { [email] }

    /// The account's user and password hash, and whether it confirmed the email (when no
    /// account did, the latest that linked it: its right password is answered
    /// `403 email_not_confirmed`).
    struct Credentials {
        var userID: String
        var passwordHash: String
        var emailConfirmed: Bool
    }

    /// Nil when no account has this email and a password.
    static func answer(from rows: QueryRows) throws(QueryShapeError) -> Credentials? {
        let row = try rows.single()
        guard let user = try row.decodeIfPresent("user_id", as: String.self),
            let hash = try row.decodeIfPresent("password_hash", as: String.self)
        else { return nil }
        return Credentials(
            userID: user, passwordHash: hash, emailConfirmed: try row.decodeIfPresent("email_confirmed") ?? false)
    }
}

/// `ferry.sign_in`: sign-in's last step, after the password checked out: the session,
/// and what becomes of the device's anonymous rows.
struct SignIn: SingleRowQuery {
    static let preparedName: String? = "ferry_sign_in"
    static let sql = """
        select status, session_id, email, reset, device_rows, cloud_rows
        from ferry.sign_in($1, $2, $3, $4, $5)
        """
    static let columns = ["status", "session_id", "email", "reset", "device_rows", "cloud_rows"]

    var userID: String
    var deviceID: String
    var refreshTokenHash: String
    /// The user of the device's anonymous session, when it sent one.
    var anonymousUserID: String?
    /// `keep_cloud`, `keep_device` or nil.
    var resolve: String?
    var parameters: [String?] { [userID, deviceID, refreshTokenHash, anonymousUserID, resolve] }

    enum Answer: QueryRowDecodable {
        /// Signed in: the new session, the account's email, and whether the device must
        /// drop its local rows.
        case signedIn(sessionID: UUID, email: String?, reset: Bool)
        /// Both the device and the account have rows: nothing changed, the client chooses.
        case resolutionRequired(deviceRows: Int, cloudRows: Int)

        init(_ row: QueryRow) throws(QueryShapeError) {
            if try row.decode("status", as: String.self) == "resolution_required" {
                self = .resolutionRequired(
                    deviceRows: try row.decodeIfPresent("device_rows") ?? 0,
                    cloudRows: try row.decodeIfPresent("cloud_rows") ?? 0)
            } else {
                self = .signedIn(
                    sessionID: try row.decode("session_id"), email: try row.decodeIfPresent("email"),
                    reset: try row.decodeIfPresent("reset") ?? false)
            }
        }
    }
}

/// `ferry.delete_anonymous_user`: a first sign-in across shards, once the account's shard
/// signed the device in: the device's anonymous user here, its rows and sessions (their
/// streams close `account_deleted`), as a sign-in on one shard deletes it.
struct DeleteAnonymousUser: SingleRowQuery {
    static let preparedName: String? = "ferry_delete_anonymous_user"
    static let sql = "select ferry.delete_anonymous_user($1) as deleted"
    static let columns = ["deleted"]

    var userID: String
    var parameters: [String?] { [userID] }

    struct Answer: QueryRowDecodable {
        /// False when it was no anonymous user here (gone already).
        var deleted: Bool
        init(_ row: QueryRow) throws(QueryShapeError) { deleted = try row.decode("deleted") }
    }
}

/// `ferry.user_rows`: whether a user is anonymous and how many live rows it owns, which a
/// first sign-in across shards counts on each side.
struct UserRows: SingleRowQuery {
    static let preparedName: String? = "ferry_user_rows"
    static let sql = "select is_anonymous, live_rows from ferry.user_rows($1)"
    static let columns = ["is_anonymous", "live_rows"]

    var userID: String
    var parameters: [String?] { [userID] }

    struct Answer: QueryRowDecodable {
        /// Nil when there is no such user here.
        var isAnonymous: Bool?
        var liveRows: Int

        init(_ row: QueryRow) throws(QueryShapeError) {
            isAnonymous = try row.decodeIfPresent("is_anonymous")
            liveRows = try row.decodeIfPresent("live_rows") ?? 0
        }
    }
}

/// `ferry.recent_revocations`: the sessions revoked since a horizon, for the
/// revoked-session cache.
struct RecentRevocations: DatabaseQuery {
    static let preparedName: String? = "ferry_recent_revocations"
    static let sql = """
        select session_id, extract(epoch from revoked_at)::bigint as revoked_at
        from ferry.recent_revocations(now() - make_interval(secs => $1))
        """
    static let columns = ["session_id", "revoked_at"]

    /// How far back, in seconds.
    var seconds: Int
    var parameters: [String?] { [String(seconds)] }

    struct Revoked: QueryRowDecodable {
        var sessionID: UUID
        /// Unix seconds.
        var revokedAt: Int

        init(_ row: QueryRow) throws(QueryShapeError) {
            sessionID = try row.decode("session_id")
            revokedAt = try row.decode("revoked_at")
        }
    }

    static func answer(from rows: QueryRows) throws(QueryShapeError) -> [Revoked] {
        var revoked: [Revoked] = []
        revoked.reserveCapacity(rows.count)
        for row in rows.all { revoked.append(try Revoked(row)) }
        return revoked
    }
}

/// `ferry.current_account`: the caller's user and email.
struct CurrentAccount: DatabaseQuery {
    static let preparedName: String? = "ferry_current_account"
    static let sql = "select user_id, email, email_confirmed from ferry.current_account()"
    static let columns = ["user_id", "email", "email_confirmed"]

    var parameters: [String?] { [] }

    struct Account {
        /// As PostgreSQL writes a uuid: lowercase.
        var userID: String
        var email: String?
        var emailConfirmed: Bool
    }

    /// Nil when the caller's session is no longer open.
    static func answer(from rows: QueryRows) throws(QueryShapeError) -> Account? {
        let row = try rows.single()
        guard let user = try row.decodeIfPresent("user_id", as: String.self) else { return nil }
        return Account(
            userID: user, email: try row.decodeIfPresent("email"),
            emailConfirmed: try row.decodeIfPresent("email_confirmed") ?? false)
    }
}

/// `ferry.link_email`: gives the caller's anonymous account an email and a password,
/// unconfirmed with a code mailed to it when `confirmation` is given, else confirmed.
struct LinkEmail: SingleRowQuery {
    static let preparedName: String? = "ferry_link_email"
    static let sql = "select ferry.link_email($1, $2, $3, $4, $5, $6) as status"
    static let columns = ["status"]

    /// The email, normalised.
    var email: String
    var passwordHash: String
    /// The code to mail, when the email must be confirmed.
    var confirmation: MailedCode?
    var parameters: [String?] {
        [
            email, passwordHash, confirmation == nil ? "false" : "true", confirmation?.hash, confirmation?.code,
            confirmation.map { String($0.validMinutes) },
        ]
    }

    enum Answer: QueryRowDecodable, Equatable {
        case linked
        case alreadyLinked
        case emailInUse
        /// The caller's session is no longer open.
        case revoked

        init(_ row: QueryRow) throws(QueryShapeError) {
            switch try row.decodeIfPresent("status", as: String.self) {
            case "ok": self = .linked
            case "already_linked": self = .alreadyLinked
            case "email_in_use": self = .emailInUse
            default: self = .revoked
            }
        }
    }
}

/// `ferry.sign_out`: revokes the caller's session.
struct SignOut: DatabaseQuery {
    static let preparedName: String? = "ferry_sign_out"
    // In FROM: a void column cannot be described as a view's (QueryShapeTests).
    static let sql = "select true as signed_out from ferry.sign_out()"
    static let columns = ["signed_out"]

    var parameters: [String?] { [] }

    static func answer(from rows: QueryRows) throws(QueryShapeError) {}
}

/// `ferry.delete_account`: deletes the caller's account and all its rows.
struct DeleteAccount: SingleRowQuery {
    static let preparedName: String? = "ferry_delete_account"
    static let sql = "select ferry.delete_account() as status"
    static let columns = ["status"]

    var parameters: [String?] { [] }

    enum Answer: QueryRowDecodable {
        /// Deleted now, or before (a retry after a lost answer).
        case deleted
        /// The caller's session is no longer open.
        case revoked

        init(_ row: QueryRow) throws(QueryShapeError) {
            self = try row.decodeIfPresent("status", as: String.self) == "ok" ? .deleted : .revoked
        }
    }
}
