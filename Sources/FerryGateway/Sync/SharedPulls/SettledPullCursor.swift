import FerryJSON

/// What a done raw pull cursor (`{"since", "shared_since"?, "last_mutation_id", …history}`,
/// sql/ferry/functions/pull.sql) says, read by the gateway to answer the shared part of a
/// pull itself (``SharedChangeCache``). A paging cursor, or one from before cursors carried
/// `last_mutation_id`, has none: ``init(raw:)`` is nil and the pull goes to PostgreSQL.
struct SettledPullCursor: Equatable {
    /// The snapshot the device's own tables were read up to.
    var since: PostgresSnapshot
    /// The snapshot the `shared` tables were read up to, when a gateway moved them on.
    var sharedSince: PostgresSnapshot?
    /// The answer's `last_mutation_id`: the device's highest mutation in `since`'s data.
    var lastMutationID: Int
    /// The history it was made in.
    var history: PullHistory

    /// The snapshot the shared tables are read from: ``sharedSince``, else ``since``.
    var sharedPosition: PostgresSnapshot { sharedSince ?? since }

    /// The cursor `raw` (ferry.pull's text, which a sealed cursor carries); nil when it is
    /// not a done cursor with every field above.
    init?(raw: String) {
        var since: PostgresSnapshot?
        var sharedSince: PostgresSnapshot?
        var lastMutationID: Int?
        var history = PullHistory.Reading()
        var utf8 = raw
        let read = utf8.withUTF8 { bytes in
            JSONObjectReader.forEachMember(in: bytes) { key, value in
                if history.read(key, value) { return true }
                switch value {
                case .string(let text) where key.equals("since"):
                    since = text.decoded().flatMap(PostgresSnapshot.init)
                    return since != nil
                case .string(let text) where key.equals("shared_since"):
                    sharedSince = text.decoded().flatMap(PostgresSnapshot.init)
                    return sharedSince != nil
                case .integer(let value) where key.equals("last_mutation_id"):
                    lastMutationID = value
                    return true
                default:
                    // A paging cursor's position, or a field this version does not know.
                    return false
                }
            }
        }
        guard read, let since, let lastMutationID, let history = history.history else { return nil }
        self.since = since
        self.sharedSince = sharedSince
        self.lastMutationID = lastMutationID
        self.history = history
    }

    /// This cursor's raw text with the shared tables moved on to `position`.
    func movingShared(to position: PostgresSnapshot) -> [UInt8] {
        var raw: [UInt8] = []
        raw.append(contentsOf: #"{"since": "#.utf8)
        JSONString.append(since.text, to: &raw)
        raw.append(contentsOf: #", "shared_since": "#.utf8)
        JSONString.append(position.text, to: &raw)
        raw.append(contentsOf: #", "last_mutation_id": "#.utf8)
        raw.appendDecimal(lastMutationID)
        history.append(to: &raw)
        raw.append(UInt8(ascii: "}"))
        return raw
    }
}

/// The history a cursor was made in (`ferry.history_here()`, sql/ferry/functions/history.sql):
/// the database's epoch, timeline, WAL position and server start.
struct PullHistory: Equatable {
    var epoch: Int
    var timeline: Int
    var lsn: String
    var started: String

    /// Whether a cursor made in this history reads the same history as `here`: the same
    /// epoch, timeline and server start. Its position (`lsn`) is not compared: on one
    /// timeline of one server run, the insert position only grows, so a cursor made there
    /// is never ahead of it (`ferry.history_left`'s usual case).
    func isSameRun(as here: PullHistory) -> Bool {
        epoch == here.epoch && timeline == here.timeline && started == here.started
    }

    /// `history_here()`'s JSON object, or nil when it lacks a field.
    init?(json: String) {
        var reading = Reading()
        var utf8 = json
        let read = utf8.withUTF8 { bytes in
            JSONObjectReader.forEachMember(in: bytes) { key, value in reading.read(key, value) }
        }
        guard read, let history = reading.history else { return nil }
        self = history
    }

    init(epoch: Int, timeline: Int, lsn: String, started: String) {
        self.epoch = epoch
        self.timeline = timeline
        self.lsn = lsn
        self.started = started
    }

    /// Appends `, "epoch": …, "timeline": …, "lsn": …, "started": …`.
    func append(to raw: inout [UInt8]) {
        raw.append(contentsOf: #", "epoch": "#.utf8)
        raw.appendDecimal(epoch)
        raw.append(contentsOf: #", "timeline": "#.utf8)
        raw.appendDecimal(timeline)
        raw.append(contentsOf: #", "lsn": "#.utf8)
        JSONString.append(lsn, to: &raw)
        raw.append(contentsOf: #", "started": "#.utf8)
        JSONString.append(started, to: &raw)
    }

    /// The four members as a JSON object's reader meets them.
    struct Reading {
        var epoch: Int?
        var timeline: Int?
        var lsn: String?
        var started: String?

        var history: PullHistory? {
            guard let epoch, let timeline, let lsn, let started else { return nil }
            return PullHistory(epoch: epoch, timeline: timeline, lsn: lsn, started: started)
        }

        /// Takes `value` when `key` is one of the four; false when it is not (or has
        /// another type).
        mutating func read(_ key: JSONObjectReader.RawString, _ value: JSONObjectReader.Value) -> Bool {
            switch value {
            case .integer(let number) where key.equals("epoch"): epoch = number
            case .integer(let number) where key.equals("timeline"): timeline = number
            case .string(let text) where key.equals("lsn"): lsn = text.decoded()
            case .string(let text) where key.equals("started"): started = text.decoded()
            default: return false
            }
            return true
        }
    }
}
