import FerryAuth
import FerryHTTP
import FerryLoop
import Foundation

/// One open stream as the hub sees it. Loop thread only.
final class StreamSubscriber: TimingWheelElement {
    let stream: any EventStream
    let userID: UUID
    let deviceID: String
    var sessionID: UUID
    /// The first second (since 1970) its token is refused (``AccessTokenSigner/acceptedUntil(_:)``).
    var expiresAt: Int
    var hasWarned = false
    var pending: PendingCue?
    /// Where its next deadline is in the hub's wheel.
    var wheelPosition: TimingWheelPosition?
    var nextHeartbeat: UInt64
    var stalledAtLastHeartbeat = false
    var drainedSinceHeartbeat = false
    var isClosing = false
    private let liveCount: LiveInstanceCount

    /// Whether messages can still go out: neither side has started closing.
    var isWritable: Bool { !isClosing && stream.isOpen }

    init(
        stream: any EventStream, claims: AccessTokenClaims, expiresAt: Int, nextHeartbeat: UInt64,
        liveCount: LiveInstanceCount
    ) {
        self.stream = stream
        userID = claims.userID
        deviceID = claims.deviceID
        sessionID = claims.sessionID
        self.expiresAt = expiresAt
        self.nextHeartbeat = nextHeartbeat
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
