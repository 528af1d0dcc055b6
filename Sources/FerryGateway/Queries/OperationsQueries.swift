import FerryPostgres

// What the gateway asks for itself, as its own role: readiness and the tombstone purge.

/// `ferry.schema_version()`: the schema version the database's functions implement.
/// Unnamed: it runs against databases that may not have the function yet.
struct SchemaVersion: SingleRowQuery {
    static let preparedName: String? = nil
    static let sql = "select ferry.schema_version() as version, pg_catalog.pg_is_in_recovery() as in_recovery"
    static let columns = ["version", "in_recovery"]

    var parameters: [String?] { [] }

    struct Answer: QueryRowDecodable {
        var version: Int
        /// A standby (hot or promoting): it answers reads, refuses every write.
        var inRecovery: Bool

        init(_ row: QueryRow) throws(QueryShapeError) {
            version = try row.decode("version")
            inRecovery = try row.decode("in_recovery")
        }
    }
}

/// `pg_notify` on the listener's private probe channel, sent through a request pool: the
/// listener must receive it (``ListenerProbe``).
struct NotifyListenerProbe: SingleRowQuery {
    static let preparedName: String? = "ferry_notify_probe"
    static let sql = "select pg_catalog.pg_notify($1, $2)::text as sent"
    static let columns = ["sent"]

    var channel: String
    var payload: String
    var parameters: [String?] { [channel, payload] }

    struct Answer: QueryRowDecodable {
        init(_ row: QueryRow) throws(QueryShapeError) {}
    }
}

/// `ferry.purge_tombstones`: deletes one batch of old tombstones.
struct PurgeTombstones: SingleRowQuery {
    static let preparedName: String? = "ferry_purge_tombstones"
    static let sql = """
        select ferry.purge_tombstones(make_interval(secs => $1::double precision), $2::integer) as deleted
        """
    static let columns = ["deleted"]

    /// Tombstones older than this many seconds go.
    var retentionSeconds: Int
    /// At most this many.
    var batchSize: Int
    var parameters: [String?] { [String(retentionSeconds), String(batchSize)] }

    struct Answer: QueryRowDecodable {
        /// How many the batch deleted.
        var deleted: Int

        init(_ row: QueryRow) throws(QueryShapeError) {
            deleted = try row.decodeIfPresent("deleted") ?? 0
        }
    }
}

/// `ferry.note_history()`: whether the database's history is one the gateway may serve
/// (`sql/ferry/functions/history.sql`): `restored` after a logical restore that
/// `ferry restore-finish` has not finished, else `current` (a new timeline noted).
struct NoteHistory: SingleRowQuery {
    static let preparedName: String? = nil
    static let sql = "select ferry.note_history() as history"
    static let columns = ["history"]

    var parameters: [String?] { [] }

    struct Answer: QueryRowDecodable {
        var history: String

        init(_ row: QueryRow) throws(QueryShapeError) {
            history = try row.decode("history")
        }
    }
}
