import FerryJSON
import Foundation

/// One loop's memory of the `shared` tables' recent changes and of which users' own
/// tables changed, from which it answers the shared part of a pull without PostgreSQL
/// (docs/ARCHITECTURE.md, "Shared-change storms"). A plain value: ``SharedPulls`` feeds it
/// what the database and the listener said, and asks it about each pull.
///
/// Why an answer from here is a pull's answer. A cursor is a snapshot (pull.sql); a pull
/// returns every row whose `_stamp` the cursor's snapshot does not see. The cache holds
/// every row of a shared table changed since the snapshot ``contentHorizon``, each as the
/// snapshot ``position`` sees it, with its stamp, so for a cursor whose shared snapshot has
/// seen everything that horizon had, the shared rows it has not seen are exactly the held
/// rows it does not see. The device's own tables stay where the cursor had them (the new
/// cursor's `since` is the old one): nothing of theirs is skipped, the next pull that
/// PostgreSQL answers brings it. Only a pull with shared rows to get is answered here, so
/// that a pull with none, which may be for an own change no cue announced (a lock's
/// heartbeat), reaches PostgreSQL. So that this never delays a device's own change, a pull
/// is answered here only when every change of the user's own rows the loop has heard of
/// (``noteOwnChange(of:xid:)``, from the cues) is visible in the cursor, and only once
/// every cue committed before the pull arrived has been heard (``SharedPulls``' barrier):
/// a device cued for its own change always gets it from PostgreSQL.
struct SharedChangeCache {
    /// At most this many users' latest own change are remembered; past it they are
    /// forgotten together, as when the listener reconnects, until a snapshot read after
    /// that sets ``ownHorizon`` past them (cursors older than it go to PostgreSQL).
    static let maximumUsers = 200_000
    /// At most this many bytes of rows are held; past it they are dropped together and
    /// ``contentHorizon`` moves on.
    static let maximumRowBytes = 16 << 20

    /// One shared row as ``position`` sees it: its stamp and what a pull sends of it.
    struct Row: Equatable {
        var stamp: UInt64
        var deleted: Bool
        /// The body (a live row) or the primary key (a tombstone), JSON as PostgreSQL wrote it.
        var json: [UInt8]
    }

    /// A read of `ferry.shared_pull_state()` and `ferry.shared_changes(since)` in one snapshot.
    struct Refresh {
        /// The snapshot it was read in.
        var position: PostgresSnapshot
        var history: PullHistory
        var purgedThrough: UInt64
        var purgeXID: UInt64?
        /// Whether every shared table has only the open read policy.
        var isOpen: Bool
        /// The rows changed since the `since` it was asked with, by table then key JSON;
        /// empty when asked with none.
        var rows: [String: [String: Row]]
        /// The ``generation`` when it was sent.
        var generation: Int
        /// Whether it was asked for the changes since ``position`` (false: the first read).
        var isIncremental: Bool
    }

    /// What to do with a pull.
    enum Decision: Equatable {
        /// Its answer: the body without its cursor (as ferry.pull's answer), and the raw cursor.
        case answer(body: [UInt8], cursor: [UInt8])
        /// PostgreSQL answers it.
        case database
    }

    /// The snapshot the held rows are as of; nil before the first refresh.
    private(set) var position: PostgresSnapshot?
    /// A cursor's shared snapshot must have seen everything this one had (so every row the
    /// cache does not hold); nil before the first refresh.
    private(set) var contentHorizon: PostgresSnapshot?
    /// A cursor's own snapshot must have seen everything this one had, so every own change
    /// the listener could have missed; nil while no snapshot taken since the listener last
    /// (re)connected has been read.
    private(set) var ownHorizon: PostgresSnapshot?
    /// Bumped when the listener reconnects: a refresh sent before cannot set ``ownHorizon``.
    private(set) var generation = 0
    private var history: PullHistory?
    private var purgedThrough: UInt64 = 0
    private var purgeXID: UInt64?
    private var isOpen = false
    private var rows: [String: [String: Row]] = [:]
    private var rowBytes = 0
    /// Each user's own changes heard since the listener (re)connected.
    private var ownChanges: [UUID: HeardChanges] = [:]

    // MARK: - What the listener heard

    /// A cue of `user`'s own rows, written by transaction `xid` (nil: a payload without
    /// one, which no cursor can be shown to have seen: that user's pulls go to PostgreSQL
    /// until the listener reconnects or the memory fills).
    mutating func noteOwnChange(of user: UUID, xid: UInt64?) {
        let xid = xid ?? .max
        if ownChanges[user] == nil && ownChanges.count >= Self.maximumUsers {
            // Every change forgotten was heard, so it committed before the next read's
            // snapshot, which becomes the horizon.
            forgetOwnChanges()
        }
        ownChanges[user, default: HeardChanges()].add(xid)
    }

    /// The listener disconnected or reconnected: cues may have been lost, so no cursor is
    /// checked against what was heard until a snapshot read after this sets ``ownHorizon``.
    mutating func listenerReset() {
        forgetOwnChanges()
    }

    private mutating func forgetOwnChanges() {
        generation += 1
        ownHorizon = nil
        ownChanges = [:]
    }

    // MARK: - What the database said

    /// Takes in a refresh: the rows it read replace the held ones of their keys.
    mutating func apply(_ refresh: Refresh) {
        if !refresh.isIncremental || !(position.map { refresh.position.sees(everythingOf: $0) } ?? false) {
            // The first read (or, defensively, one that has not seen what is held): hold
            // nothing from before it.
            rows = [:]
            rowBytes = 0
            contentHorizon = refresh.position
        }
        for (table, changed) in refresh.rows {
            for (key, row) in changed {
                if let old = rows[table]?[key] { rowBytes -= old.json.count + key.utf8.count }
                rows[table, default: [:]][key] = row
                rowBytes += row.json.count + key.utf8.count
            }
        }
        position = refresh.position
        history = refresh.history
        purgedThrough = refresh.purgedThrough
        purgeXID = refresh.purgeXID
        isOpen = refresh.isOpen
        if ownHorizon == nil && refresh.generation == generation {
            ownHorizon = refresh.position
        }
        if rowBytes > Self.maximumRowBytes {
            // Every held row is visible in `position`: a cursor that has seen all it had
            // saw them.
            rows = [:]
            rowBytes = 0
            contentHorizon = refresh.position
        }
    }

    // MARK: - Answering a pull

    /// Whether `user`'s pull with `cursor` and `limit` is answered from here, and how.
    func decide(_ cursor: SettledPullCursor, user: UUID, limit: Int) -> Decision {
        guard let position, mayAnswer(cursor, user: user) else { return .database }
        let shared = cursor.sharedPosition
        var changed: [(table: String, rows: [(key: String, row: Row)])] = []
        var count = 0
        for (table, held) in rows {
            let unseen = held.filter { !shared.isVisible($0.value.stamp) }
            guard !unseen.isEmpty else { continue }
            count += unseen.count
            if count > limit { return .database }
            let ordered = unseen.sorted { ($0.value.stamp, $0.key) < ($1.value.stamp, $1.key) }
            changed.append((table, ordered.map { (key: $0.key, row: $0.value) }))
        }
        // Memory answers only a pull that has shared news to get: one with none might be
        // for a change of the user's own that no cue announced (a lock's heartbeat, a
        // write under ferry.skip_cues), which PostgreSQL then brings.
        guard !changed.isEmpty else { return .database }
        changed.sort { $0.table < $1.table }
        return .answer(
            body: Self.body(changed, lastMutationID: cursor.lastMutationID), cursor: cursor.movingShared(to: position))
    }

    /// Whether a pull of `user`'s with `cursor` may be answered from here, rows apart: the
    /// cursor is of this history, has seen what the horizons had, is not past the purge
    /// horizon, and has seen every own change of the user the loop heard of. What
    /// ``SharedPulls`` asks before it waits for a barrier, which only more rows follow.
    func mayAnswer(_ cursor: SettledPullCursor, user: UUID) -> Bool {
        guard isOpen, let contentHorizon, let ownHorizon, let history,
            cursor.history.isSameRun(as: history),
            cursor.since.sees(everythingOf: ownHorizon), cursor.sharedPosition.sees(everythingOf: contentHorizon),
            !isPurged(after: cursor.since), !isPurged(after: cursor.sharedPosition)
        else { return false }
        return ownChanges[user]?.areVisible(in: cursor.since) ?? true
    }

    /// Whether a held row is one `cursor`'s shared snapshot has not seen.
    func hasNews(for cursor: SettledPullCursor) -> Bool {
        let shared = cursor.sharedPosition
        return rows.values.contains { held in held.values.contains { !shared.isVisible($0.stamp) } }
    }

    /// Whether the purge may have removed a tombstone `snapshot` has not seen
    /// (ferry.pull's check): PostgreSQL then answers `cursor_expired`.
    private func isPurged(after snapshot: PostgresSnapshot) -> Bool {
        guard purgedThrough > 0, snapshot.xmin <= purgedThrough else { return false }
        guard let purgeXID else { return true }
        return !snapshot.isVisible(purgeXID)
    }

    /// A pull answer without its cursor, as ferry.pull writes one (the gateway splices the
    /// sealed cursor in after it).
    static func body(_ changed: [(table: String, rows: [(key: String, row: Row)])], lastMutationID: Int) -> [UInt8] {
        var body: [UInt8] = []
        body.append(contentsOf: #"{"changes": {"#.utf8)
        for (index, table) in changed.enumerated() {
            if index > 0 { body.append(contentsOf: ", ".utf8) }
            JSONString.append(table.table, to: &body)
            body.append(contentsOf: #": {"deletes": ["#.utf8)
            appendJoined(table.rows.filter(\.row.deleted), to: &body)
            body.append(contentsOf: #"], "upserts": ["#.utf8)
            appendJoined(table.rows.filter { !$0.row.deleted }, to: &body)
            body.append(contentsOf: "]}".utf8)
        }
        body.append(contentsOf: #"}, "has_more": false, "last_mutation_id": "#.utf8)
        body.appendDecimal(lastMutationID)
        body.append(UInt8(ascii: "}"))
        return body
    }

    private static func appendJoined(_ rows: [(key: String, row: Row)], to body: inout [UInt8]) {
        for (index, entry) in rows.enumerated() {
            if index > 0 { body.append(contentsOf: ", ".utf8) }
            body.append(contentsOf: entry.row.json)
        }
    }
}

/// A user's own changes a loop heard: the transactions of the latest few, and the highest
/// of those it let go. Visibility is not monotonic in transaction ids (a cursor may see a
/// later transaction and not an earlier one still running when it was taken), so the
/// latest alone would not do.
struct HeardChanges: Equatable {
    /// How many transactions are kept; past it the lowest goes.
    static let kept = 4
    /// Ascending.
    private(set) var recent: [UInt64] = []
    /// The highest transaction let go, if any.
    private(set) var highestForgotten: UInt64?

    mutating func add(_ xid: UInt64) {
        let index = recent.firstIndex { $0 >= xid } ?? recent.endIndex
        guard index == recent.endIndex || recent[index] != xid else { return }
        recent.insert(xid, at: index)
        if recent.count > Self.kept {
            let forgotten = recent.removeFirst()
            highestForgotten = max(highestForgotten ?? 0, forgotten)
        }
    }

    /// Whether `snapshot` sees every one of these changes: each kept one, and every one
    /// let go (all below its `xmin`, where a snapshot sees whatever committed).
    func areVisible(in snapshot: PostgresSnapshot) -> Bool {
        if let highestForgotten, highestForgotten >= snapshot.xmin { return false }
        return recent.allSatisfy(snapshot.isVisible)
    }
}
