import FerryPostgres
import Foundation

// The email directory's functions (sql/directory/functions/directory.sql), run on the
// directory's own pool (LoopContext.directory) as the gateway's directory login.

/// `directory.claim`: claims an email for this shard's user before the shard commits.
struct ClaimEmail: SingleRowQuery {
    static let preparedName: String? = "ferry_directory_claim"
    static let sql = "select outcome, claimed_at::text as claimed_at from directory.claim($1, $2, $3)"
    static let columns = ["outcome", "claimed_at"]

    var email: String
    var shard: Int
    var userID: String
    var parameters: [String?] { [email, String(shard), userID] }

    enum Answer: QueryRowDecodable {
        /// Pending for this (shard, user), made or renewed at `claimedAt` (the text that
        /// ``SettleClaim`` compares).
        case claimed(claimedAt: String)
        /// Already this (shard, user)'s, linked.
        case linked
        /// Another (shard, user)'s.
        case inUse

        init(_ row: QueryRow) throws(QueryShapeError) {
            switch try row.decode("outcome", as: String.self) {
            case "claimed": self = .claimed(claimedAt: try row.decode("claimed_at"))
            case "linked": self = .linked
            default: self = .inUse
            }
        }
    }
}

/// `directory.mark_linked`: the shard committed; the claim is the holder's for good.
struct MarkEmailLinked: SingleRowQuery {
    static let preparedName: String? = "ferry_directory_mark_linked"
    static let sql = "select directory.mark_linked($1, $2, $3) as marked"
    static let columns = ["marked"]

    var email: String
    var shard: Int
    var userID: String
    var parameters: [String?] { [email, String(shard), userID] }

    struct Answer: QueryRowDecodable {
        var marked: Bool
        init(_ row: QueryRow) throws(QueryShapeError) { marked = try row.decode("marked") }
    }
}

/// `directory.settle_claim`: a pending claim settled as this shard's database found it.
struct SettleClaim: SingleRowQuery {
    static let preparedName: String? = "ferry_directory_settle_claim"
    static let sql = "select directory.settle_claim($1, $2, $3, $4::timestamptz, $5) as outcome"
    static let columns = ["outcome"]

    var email: String
    var shard: Int
    var userID: String
    /// The claim's time as ``ClaimEmail`` or ``StaleClaims`` read it.
    var claimedAt: String
    /// Whether this shard's user has the email as its own.
    var linked: Bool
    var parameters: [String?] { [email, String(shard), userID, claimedAt, linked ? "true" : "false"] }

    struct Answer: QueryRowDecodable {
        /// `linked`, `released` or `unchanged`.
        var outcome: String
        init(_ row: QueryRow) throws(QueryShapeError) { outcome = try row.decode("outcome") }
    }
}

/// `directory.stale_claims`: this shard's claims pending for longer than the bound.
struct StaleClaims: DatabaseQuery {
    static let preparedName: String? = "ferry_directory_stale_claims"
    static let sql = "select email, user_id, claimed_at::text as claimed_at from directory.stale_claims($1, $2, $3)"
    static let columns = ["email", "user_id", "claimed_at"]

    var shard: Int
    var olderThanSeconds: Int
    var limit: Int
    var parameters: [String?] { [String(shard), String(olderThanSeconds), String(limit)] }

    struct Claim: QueryRowDecodable {
        var email: String
        var userID: String
        var claimedAt: String
        init(_ row: QueryRow) throws(QueryShapeError) {
            email = try row.decode("email")
            userID = try row.decode("user_id")
            claimedAt = try row.decode("claimed_at")
        }
    }

    static func answer(from rows: QueryRows) throws(QueryShapeError) -> [Claim] {
        var claims: [Claim] = []
        for row in rows.all { claims.append(try Claim(row)) }
        return claims
    }
}

/// `ferry.has_email`: whether this shard's user has an email as its own (confirmed, when
/// `confirmed`): what settles a pending directory claim (sql/ferry/functions/accounts.sql).
struct UserHasEmail: SingleRowQuery {
    static let preparedName: String? = "ferry_user_has_email"
    static let sql = "select ferry.user_has_email($1, $2, $3) as has_email"
    static let columns = ["has_email"]

    var userID: String
    var email: String
    var confirmed: Bool
    var parameters: [String?] { [userID, email, confirmed ? "true" : "false"] }

    struct Answer: QueryRowDecodable {
        var hasEmail: Bool
        init(_ row: QueryRow) throws(QueryShapeError) { hasEmail = try row.decode("has_email") }
    }
}

/// `ferry.shard`: this cluster's shard number, whose directory claims this gateway settles.
struct ThisShard: SingleRowQuery {
    static let preparedName: String? = "ferry_this_shard"
    static let sql = "select ferry.shard() as shard"
    static let columns = ["shard"]
    var parameters: [String?] { [] }

    struct Answer: QueryRowDecodable {
        var shard: Int
        init(_ row: QueryRow) throws(QueryShapeError) { shard = try row.decode("shard") }
    }
}

/// `directory.unlink`: before an account's deletion on its shard, its row back to
/// pending, so that a crash after the shard's deletion leaves a claim that reconciliation
/// releases, never a linked row of a deleted user.
struct UnlinkEmail: SingleRowQuery {
    static let preparedName: String? = "ferry_directory_unlink"
    static let sql = "select directory.unlink($1, $2, $3) as changed"
    static let columns = ["changed"]

    var email: String
    var shard: Int
    var userID: String
    var parameters: [String?] { [email, String(shard), userID] }

    struct Answer: QueryRowDecodable {
        var changed: Bool
        init(_ row: QueryRow) throws(QueryShapeError) { changed = try row.decode("changed") }
    }
}

/// `directory.release`: the row deleted, once the shard deleted the account.
struct ReleaseEmail: SingleRowQuery {
    static let preparedName: String? = "ferry_directory_release"
    static let sql = "select directory.release($1, $2, $3) as changed"
    static let columns = ["changed"]

    var email: String
    var shard: Int
    var userID: String
    var parameters: [String?] { [email, String(shard), userID] }

    typealias Answer = UnlinkEmail.Answer
}

/// `directory.lookup`: the shard whose account an email is, if any.
struct LookUpEmail: DatabaseQuery {
    static let preparedName: String? = "ferry_directory_lookup"
    static let sql = "select shard, state from directory.lookup($1)"
    static let columns = ["shard", "state"]

    var email: String
    var parameters: [String?] { [email] }

    /// Nil when the directory has no row of the email.
    static func answer(from rows: QueryRows) throws(QueryShapeError) -> Int? {
        guard let row = rows.all.first else { return nil }
        return try row.decode("shard", as: Int.self)
    }
}
