import FerryPostgres

// Push, pull and schema (sql/ferry/functions/push.sql, pull.sql, registry.sql), run as the
// caller. Their answers are JSON that PostgreSQL built, read as bytes and forwarded.

/// `ferry.push_body`: a push batch applied.
struct Push: SingleRowQuery {
    static let preparedName: String? = "ferry_push"
    // The body goes as text: a mutation PostgreSQL cannot store (a \u0000) fails its own
    // cast to jsonb there, not the whole statement's. The limit is checked before any
    // mutation is read, so an oversized batch costs no parse and writes nothing.
    /// The column a push statement returns beside its answer: whether the push queued cues
    /// for the gateway to send after the commit (ferry.queue_cue, cues.sql). Read after the
    /// push ran, which is in the statement's FROM (a function there runs first).
    static let cuesQueuedColumn = "pg_catalog.current_setting('ferry.cues_queued', true) = 'on' as cues_queued"
    static let sql = "select answer, \(cuesQueuedColumn) from ferry.push_body($1, $2::integer) answer"
    static let columns = ["answer", "cues_queued"]

    /// The request's body, as received (checked UTF-8).
    var body: String
    var maxMutations: Int
    var parameters: [String?] { [body, String(maxMutations)] }

    struct Answer: QueryRowDecodable {
        /// The push answer's JSON; nil when the batch has more than `maxMutations` mutations.
        var json: [UInt8]?
        /// Whether the push queued cues, which ``QueuedCueSender`` sends once it committed.
        var cuesQueued: Bool

        init(_ row: QueryRow) throws(QueryShapeError) {
            json = try row.bytesIfPresent("answer")
            cuesQueued = try row.decodeIfPresent("cues_queued") ?? false
        }
    }
}

/// `ferry.send_queued_cues`: sends the cues pushes queued (sql/ferry/functions/cues.sql),
/// as the gateway, after the commit of a push that queued some and every second.
struct SendQueuedCues: SingleRowQuery {
    static let preparedName: String? = "ferry_send_queued_cues"
    static let sql = "select ferry.send_queued_cues() as sent"
    static let columns = ["sent"]

    var parameters: [String?] { [] }

    struct Answer: QueryRowDecodable {
        /// How many distinct cues went out.
        var sent: Int

        init(_ row: QueryRow) throws(QueryShapeError) {
            sent = try row.decodeIfPresent("sent") ?? 0
        }
    }
}

/// `ferry.send_queued_cues_then_notify`: a ``SharedPulls`` barrier, as the gateway. Its
/// notification reaches the listener behind every cue committed before it was sent, the
/// cues pushes queued included (sql/ferry/functions/cues.sql).
struct SendQueuedCuesThenNotify: SingleRowQuery {
    static let preparedName: String? = "ferry_send_queued_cues_then_notify"
    static let sql = "select ferry.send_queued_cues_then_notify($1, $2) as sent"
    static let columns = ["sent"]

    var channel: String
    var payload: String
    var parameters: [String?] { [channel, payload] }

    typealias Answer = SendQueuedCues.Answer
}

/// `ferry.pull`: the changes since a cursor, in the statement's one snapshot. The raw
/// cursor comes apart from the rest of the answer, so the gateway seals it and splices it
/// in without parsing the JSON.
struct Pull: SingleRowQuery {
    static let preparedName: String? = "ferry_pull"
    static let sql = """
        select answer ->> 'cursor' as cursor, (answer - 'cursor')::text as body from ferry.pull($1, $2::integer) answer
        """
    static let columns = ["cursor", "body"]

    /// `ferry.pull`'s raw cursor text; nil for a first load.
    var cursor: String?
    var limit: Int
    var parameters: [String?] { [cursor, String(limit)] }

    struct Answer: QueryRowDecodable {
        /// The raw cursor, to be sealed.
        var cursor: [UInt8]
        /// The answer's JSON object without its cursor.
        var body: [UInt8]

        init(_ row: QueryRow) throws(QueryShapeError) {
            cursor = try row.bytes("cursor")
            body = try row.bytes("body")
        }
    }
}

/// `ferry.table_schema`: the tables the caller syncs, their columns and strategies.
struct TableSchema: SingleRowQuery {
    static let preparedName: String? = "ferry_table_schema"
    static let sql = "select ferry.table_schema() as answer"
    static let columns = ["answer"]

    var parameters: [String?] { [] }

    typealias Answer = BuiltJSON
}

/// The one JSON value a function built, as bytes; NULL is a shape error.
struct BuiltJSON: QueryRowDecodable {
    var bytes: [UInt8]

    init(_ row: QueryRow) throws(QueryShapeError) {
        bytes = try row.bytes("answer")
    }
}

/// `ferry.history_here()` on the primary: where a cursor made there now would be made,
/// read when a pull for a read replica arrives (sql/ferry/functions/replicas.sql).
struct PrimaryHistory: SingleRowQuery {
    static let preparedName: String? = "ferry_primary_history"
    static let sql = "select ferry.history_here()::text as history"
    static let columns = ["history"]

    var parameters: [String?] { [] }

    struct Answer: QueryRowDecodable {
        /// The primary's history, JSON text, handed to ``ReplicaCaughtUp``.
        var json: String

        init(_ row: QueryRow) throws(QueryShapeError) {
            json = try row.decode("history")
        }
    }
}

/// `ferry.replica_caught_up`: the first statement of a read on a hot standby, which fails
/// (`FRLAG`, `FRPRI`) unless the standby has replayed past the primary's position.
struct ReplicaCaughtUp: SingleRowQuery {
    static let preparedName: String? = "ferry_replica_caught_up"
    static let sql = "select ferry.replica_caught_up($1::jsonb) as caught_up"
    static let columns = ["caught_up"]

    /// ``PrimaryHistory``'s answer.
    var primaryHistory: String
    var parameters: [String?] { [primaryHistory] }

    struct Answer: QueryRowDecodable {
        init(_ row: QueryRow) throws(QueryShapeError) {}
    }
}

extension SQLState {
    /// `FRLAG`, Ferry's own: the read replica has not replayed far enough yet (ask again).
    static let replicaBehind = "FRLAG"
    /// `FRPRI`, Ferry's own: only the primary can serve this read.
    static let primaryOnly = "FRPRI"
}

/// `ferry.shared_pull_state()` and `ferry.shared_changes(since)` in one statement, so in
/// one snapshot, as `ferry_client` (sql/ferry/functions/shared_pulls.sql): what a loop's
/// ``SharedChangeCache`` takes in. One row per shared row changed since `since` (the
/// state repeated on each), or one row with only the state.
struct SharedChanges: DatabaseQuery {
    static let preparedName: String? = "ferry_shared_changes"
    static let sql = """
        select s.snapshot, s.history::text as history, s.purged_through::text as purged_through,
            s.purge_xid::text as purge_xid, s.open, r.table_name::text as table_name, r.stamp::text as stamp,
            r.deleted, r.key::text as key, r.body::text as body
        from ferry.shared_pull_state() s left join lateral ferry.shared_changes($1::pg_snapshot) r on true
        """
    static let columns = [
        "snapshot", "history", "purged_through", "purge_xid", "open", "table_name", "stamp", "deleted", "key", "body",
    ]

    /// The snapshot of the cache's last read, nil for its first.
    var since: String?
    var parameters: [String?] { [since] }

    static func answer(from rows: QueryRows) throws(QueryShapeError) -> SharedChangeCache.Refresh {
        let first = try rows.first()
        let snapshotText: String = try first.decode("snapshot")
        guard let position = PostgresSnapshot(snapshotText) else {
            throw first.unreadable("snapshot", as: "pg_snapshot")
        }
        guard let history = PullHistory(json: try first.decode("history")) else {
            throw first.unreadable("history", as: "history_here() object")
        }
        let purgedThrough = try first.decodeIfPresent("purged_through", as: String.self).flatMap {
            PostgresSnapshot.xid($0.utf8)
        }
        let purgeXID = try first.decodeIfPresent("purge_xid", as: String.self).flatMap { PostgresSnapshot.xid($0.utf8) }
        var changed: [String: [String: SharedChangeCache.Row]] = [:]
        for row in rows.all {
            guard let table = try row.decodeIfPresent("table_name", as: String.self) else { continue }
            let stampText: String = try row.decode("stamp")
            guard let stamp = PostgresSnapshot.xid(stampText.utf8) else { throw row.unreadable("stamp", as: "xid8") }
            let deleted: Bool = try row.decode("deleted")
            let key: String = try row.decode("key")
            let json = deleted ? Array(key.utf8) : try row.bytes("body")
            changed[table, default: [:]][key] = SharedChangeCache.Row(stamp: stamp, deleted: deleted, json: json)
        }
        return SharedChangeCache.Refresh(
            position: position, history: history, purgedThrough: purgedThrough ?? 0, purgeXID: purgeXID,
            isOpen: try first.decode("open"), rows: changed, generation: 0, isIncremental: false)
    }
}
