import FerryPostgres

// WatermelonDB's sync (sql/ferry/functions/watermelon.sql), run as the caller; PostgreSQL
// builds each answer, forwarded as bytes.

/// `ferry.watermelon_pull`: the changes since `last_pulled_at`.
struct WatermelonPull: SingleRowQuery {
    static let preparedName: String? = "ferry_watermelon_pull"
    static let sql = "select ferry.watermelon_pull($1::bigint, $2) as answer"
    static let columns = ["answer"]

    /// nil: a first sync.
    var lastPulledAt: Int64?
    /// The migration's JSON text, nil when there is none.
    var migration: String?
    var parameters: [String?] { [lastPulledAt.map { String($0) }, migration] }

    typealias Answer = BuiltJSON
}

/// `ferry.watermelon_push`: the records of a push, applied or refused as a whole.
struct WatermelonPush: SingleRowQuery {
    static let preparedName: String? = "ferry_watermelon_push"
    static let sql = "select ferry.watermelon_push($1::bigint, $2, $3::integer) as answer"
    static let columns = ["answer"]

    var lastPulledAt: Int64
    /// The request's body, as received (checked UTF-8).
    var body: String
    var maxRecords: Int
    var parameters: [String?] { [String(lastPulledAt), body, String(maxRecords)] }

    typealias Answer = BuiltJSON
}
