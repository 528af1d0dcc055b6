import FerryHTTP
import FerryLoop
import Foundation

/// One open stream as the hub sees it: the stream, its ``StreamLifecycle`` and the cue it
/// owes. Loop thread only.
final class StreamSubscriber: TimingWheelElement {
    /// The hub the stream's callbacks report to (it outlives its streams).
    unowned let hub: CueHub
    let stream: any EventStream
    let deviceID: String
    var lifecycle: StreamLifecycle
    /// Shared by every stream a broadcast marked while it had none pending.
    var pending: PendingCue?
    /// Where its next deadline is in the hub's wheel.
    var wheelPosition: TimingWheelPosition?

    var userID: UUID { lifecycle.userID }

    /// Whether messages can still go out: neither side has started closing.
    var isWritable: Bool { lifecycle.isOpen && stream.isOpen }

    init(hub: CueHub, stream: any EventStream, deviceID: String, lifecycle: StreamLifecycle) {
        self.hub = hub
        self.stream = stream
        self.deviceID = deviceID
        self.lifecycle = lifecycle
        hub.liveSubscribers.increment()
    }

    deinit {
        hub.liveSubscribers.decrement()
    }
}

/// The cue a stream owes its client: every table named since the last one sent.
///
/// Immutable, so that the streams one notification marks share one (a broadcast marks
/// them all) and an idle stream holds a nil reference rather than the cue's fields; a
/// merge that changes something makes a new one.
final class PendingCue {
    /// Empty with `everything`: anything may have changed.
    let tables: [String]
    let everything: Bool
    /// The writing device, while every merged change came from the same one.
    let origin: String?
    /// When the oldest merged notification arrived (``MonotonicClock`` nanoseconds).
    let since: UInt64

    convenience init(table: String?, origin: String?, since: UInt64) {
        self.init(
            tables: table.map { [$0] } ?? [], everything: table == nil, origin: table == nil ? nil : origin,
            since: since)
    }

    private init(tables: [String], everything: Bool, origin: String?, since: UInt64) {
        self.tables = tables
        self.everything = everything
        self.origin = origin
        self.since = since
    }

    /// This cue with `table` (nil: everything) from `origin` merged in: itself when that
    /// changes nothing.
    func merging(table: String?, origin: String?) -> PendingCue {
        let mergedOrigin = self.origin == origin ? origin : nil
        guard let table else {
            if everything && mergedOrigin == self.origin { return self }
            return PendingCue(tables: [], everything: true, origin: mergedOrigin, since: since)
        }
        let mergedTables = everything || tables.contains(table) ? tables : tables + [table]
        if mergedTables.count == tables.count && mergedOrigin == self.origin { return self }
        return PendingCue(tables: mergedTables, everything: everything, origin: mergedOrigin, since: since)
    }

    func sameMessage(as other: PendingCue) -> Bool {
        tables == other.tables && everything == other.everything && origin == other.origin
    }

    var message: [UInt8] { StreamMessage.cue(tables: tables, origin: origin) }
}
