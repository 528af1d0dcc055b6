import FerryPostgres

// WatermelonDB's sync (sql/ferry/functions/watermelon.sql), run as the caller; PostgreSQL
// builds each answer, forwarded as bytes.

/// `ferry.watermelon_pull_open`: the changes since `last_pulled_at`, as a cursor
/// (``WatermelonPullCursor/name``) the answer is streamed from, in the transaction
/// ``WatermelonPullCursor/begin`` opened; the served tables it names, in order, and the
/// answer's timestamp. One row per table (one with a null name when there is none).
struct WatermelonPullOpen: DatabaseQuery {
    static let preparedName: String? = "ferry_watermelon_pull_open"
    static let sql = """
        select t.name, o."timestamp"
        from ferry.watermelon_pull_open($1::bigint, $2, 'ferry_watermelon') o
        left join lateral pg_catalog.unnest(o.tables) with ordinality t(name, n) on true
        order by t.n
        """
    static let columns = ["name", "timestamp"]

    /// nil: a first sync.
    var lastPulledAt: Int64?
    /// The migration's JSON text, nil when there is none.
    var migration: String?
    var parameters: [String?] { [lastPulledAt.map { String($0) }, migration] }

    struct Answer {
        /// The served tables the caller reads, in the order their records come.
        var tables: [String]
        /// The answer's `timestamp`.
        var timestamp: Int
    }

    static func answer(from rows: QueryRows) throws(QueryShapeError) -> Answer {
        let first = rows.count == 0 ? try rows.single() : rows.all[0]
        var tables: [String] = []
        for row in rows.all {
            if let name = try row.decodeIfPresent("name", as: String.self) { tables.append(name) }
        }
        return Answer(tables: tables, timestamp: try first.decode("timestamp"))
    }
}

/// The statements around ``WatermelonPullOpen``: its transaction and the reads of its
/// cursor, whose rows are `(name, deleted, record)` (sql/ferry/functions/watermelon_pull.sql).
enum WatermelonPullCursor {
    /// The cursor ``WatermelonPullOpen`` opens.
    static let name = "ferry_watermelon"
    /// The transaction the cursor lives in (read committed: the cursor keeps the one
    /// snapshot it was opened in, and the timestamp names it).
    static let begin = PostgresStatement("begin")
    static let commit = PostgresStatement("commit")
    static let rollback = PostgresStatement("rollback")
    /// The cursor's next `rows` rows (FETCH takes no parameters).
    static func fetch(_ rows: Int) -> PostgresStatement {
        PostgresStatement("fetch forward \(max(rows, 1)) from \(name)")
    }
}

/// `ferry.watermelon_push`: the records of a push, applied or refused as a whole.
struct WatermelonPush: SingleRowQuery {
    static let preparedName: String? = "ferry_watermelon_push"
    static let sql =
        "select answer, \(Push.cuesQueuedColumn) from ferry.watermelon_push($1::bigint, $2, $3::integer) answer"
    static let columns = ["answer", "cues_queued"]

    var lastPulledAt: Int64
    /// The request's body, as received (checked UTF-8).
    var body: String
    var maxRecords: Int
    var parameters: [String?] { [String(lastPulledAt), body, String(maxRecords)] }

    struct Answer: QueryRowDecodable {
        var bytes: [UInt8]
        /// Whether the push queued cues, which ``QueuedCueSender`` sends once it committed.
        var cuesQueued: Bool

        init(_ row: QueryRow) throws(QueryShapeError) {
            bytes = try row.bytes("answer")
            cuesQueued = try row.decodeIfPresent("cues_queued") ?? false
        }
    }
}
