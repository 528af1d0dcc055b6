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
    var pending: PendingCue?
    /// Where its next deadline is in the hub's wheel.
    var wheelPosition: TimingWheelPosition?
    private let liveCount: LiveInstanceCount

    var userID: UUID { lifecycle.userID }

    /// Whether messages can still go out: neither side has started closing.
    var isWritable: Bool { lifecycle.isOpen && stream.isOpen }

    init(
        hub: CueHub, stream: any EventStream, deviceID: String, lifecycle: StreamLifecycle,
        liveCount: LiveInstanceCount
    ) {
        self.hub = hub
        self.stream = stream
        self.deviceID = deviceID
        self.lifecycle = lifecycle
        self.liveCount = liveCount
        liveCount.increment()
    }

    deinit {
        liveCount.decrement()
    }
}

/// The cue a stream owes its client: every table named since the last one sent.
struct PendingCue {
    /// Empty with `everything`: anything may have changed.
    private(set) var tables: [String]
    private(set) var everything: Bool
    /// The writing device, while every merged change came from the same one.
    private(set) var origin: String?
    /// When the oldest merged notification arrived (``MonotonicClock`` nanoseconds).
    let since: UInt64

    init(table: String?, origin: String?, since: UInt64) {
        tables = table.map { [$0] } ?? []
        everything = table == nil
        self.origin = table == nil ? nil : origin
        self.since = since
    }

    mutating func merge(table: String?, origin: String?) {
        if self.origin != origin { self.origin = nil }
        guard let table else {
            everything = true
            tables = []
            return
        }
        if !everything && !tables.contains(table) { tables.append(table) }
    }

    func sameMessage(as other: PendingCue) -> Bool {
        tables == other.tables && everything == other.everything && origin == other.origin
    }

    var message: [UInt8] { StreamMessage.cue(tables: tables, origin: origin) }
}
