import FerryAuth
import FerryHTTP
import FerryJSON
import FerryLoop
import Foundation

/// One loop's open streams and the cues for them (docs/ARCHITECTURE.md, "Realtime: the
/// cue path"). Loop thread only.
///
/// The process's listener hands every loop each batch of notifications; the hub
/// finds the streams of each cue's user and marks them dirty, merging table names, so
/// a stream that cannot take bytes right now holds one pending cue, never a queue.
/// Heartbeats, token warnings and expiry run from one timer per loop (a
/// ``TimingWheel``), so an idle stream costs no timer of its own.
final class CueHub {
    /// The knobs of PROTOCOL.md's stream lifecycle.
    struct Settings: Sendable {
        /// Between heartbeats (the `heartbeat_ms` of `hello`).
        var heartbeatMilliseconds: Int = 25_000
        /// How long before its token expires a stream gets `token_expiring`.
        var tokenWarningSeconds: Int = 60
        /// Unsent bytes over this close the stream `4008 too_slow` at once.
        var maxUnsentBytes: Int = 64 * 1024
    }

    let loop: EventLoop
    let settings: Settings
    private let accounts: Accounts
    /// Counted by `StreamRoutes` before a stream opens; given back here when it is gone.
    private let quota: ConcurrencyLimit<UUID>
    private let metrics: LoopMetrics
    private var streamsByUser: [UUID: [StreamSubscriber]] = [:]
    private var wheel: TimingWheel<StreamSubscriber>
    private var ticker: FerryLoop.Timer?
    private var dirty: [StreamSubscriber] = []
    private var isShuttingDown = false
    private var onLastStreamClosed: (() -> Void)?

    /// Streams open on this loop.
    private(set) var streamCount = 0
    /// The ``StreamSubscriber`` objects of this hub that exist, open or closed: one that
    /// outlived its stream's close shows here. Any thread.
    let liveSubscribers = LiveInstanceCount()

    init(
        loop: EventLoop, settings: Settings, accounts: Accounts, quota: ConcurrencyLimit<UUID>, metrics: LoopMetrics
    ) {
        self.loop = loop
        self.settings = settings
        self.accounts = accounts
        self.quota = quota
        self.metrics = metrics
        // 250 ms resolution; 256 slots span a minute, the default heartbeat's reach.
        wheel = TimingWheel(tickMilliseconds: 250, slotCount: 256, now: loop.now)
    }

    // MARK: - Streams

    /// Takes a freshly opened stream, counted in the user's stream quota: says
    /// `hello`, warns at once if the token is about to expire, and delivers the user's
    /// cues from now on.
    func add(_ stream: any EventStream, claims: AccessTokenClaims) {
        loop.preconditionInEventLoop()
        guard !isShuttingDown else {
            quota.release(claims.userID)
            stream.close(code: StreamCloseReason.goingAway.code, reason: StreamCloseReason.goingAway.text)
            return
        }
        let subscriber = StreamSubscriber(
            stream: stream, claims: claims, expiresAt: accounts.tokens.acceptedUntil(claims),
            nextHeartbeat: loop.now + UInt64(settings.heartbeatMilliseconds), liveCount: liveSubscribers)
        stream.onClose = { [unowned self, unowned subscriber] in remove(subscriber) }
        stream.onWritable = { [unowned self, unowned subscriber] in
            subscriber.drainedSinceHeartbeat = true
            if subscriber.pending != nil { sendPending(subscriber) }
        }
        stream.onMessage = { [unowned self, unowned subscriber] message in received(message, from: subscriber) }
        streamsByUser[claims.userID, default: []].append(subscriber)
        streamCount += 1
        metrics.streamOpened(stream.transport)
        stream.send(
            type: "hello",
            json: StreamMessage.hello(
                userID: claims.userID, deviceID: claims.deviceID, heartbeatMilliseconds: settings.heartbeatMilliseconds)
        )
        if ticker == nil {
            let timer = FerryLoop.Timer(loop: loop)
            timer.start(after: wheel.tickMilliseconds, repeat: wheel.tickMilliseconds) { [unowned self] in tick() }
            ticker = timer
        }
        checkDeadlines(subscriber)
    }

    private func remove(_ subscriber: StreamSubscriber) {
        subscriber.isClosing = true
        // Its deadline would keep the subscriber (and its stream and connection) until
        // the wheel reached it, and never while the loop has no stream to tick for.
        wheel.cancel(subscriber)
        quota.release(subscriber.userID)
        metrics.streamClosed(subscriber.stream.transport)
        streamCount -= 1
        if var streams = streamsByUser[subscriber.userID] {
            streams.removeAll { $0 === subscriber }
            streamsByUser[subscriber.userID] = streams.isEmpty ? nil : streams
        }
        if streamCount == 0 {
            ticker?.close()
            ticker = nil
            if let done = onLastStreamClosed {
                onLastStreamClosed = nil
                done()
            }
        }
    }

    private func close(_ subscriber: StreamSubscriber, _ reason: StreamCloseReason) {
        guard !subscriber.isClosing else { return }
        subscriber.isClosing = true
        if reason == .tooSlow { metrics.streamTooSlow() }
        subscriber.stream.close(code: reason.code, reason: reason.text)
    }

    // MARK: - Cues

    /// Marks the streams each cue concerns and sends what their sockets can take now.
    func deliver(_ cues: [Cue]) {
        for cue in cues {
            switch cue.audience {
            case .user(let user):
                guard let streams = streamsByUser[user] else { continue }
                for subscriber in streams { mark(subscriber, table: cue.table, origin: cue.origin, at: cue.receivedAt) }
            case .everyone:
                forEachStream { mark($0, table: cue.table, origin: cue.origin, at: cue.receivedAt) }
            }
        }
        flush()
    }

    /// Cues every stream with "anything may have changed": notifications sent while
    /// the listener was down are lost.
    func cueEveryStream() {
        let now = MonotonicClock.now()
        forEachStream { mark($0, table: nil, origin: nil, at: now) }
        flush()
    }

    /// `table` nil: anything may have changed.
    private func mark(_ subscriber: StreamSubscriber, table: String?, origin: String?, at receivedAt: UInt64) {
        guard !subscriber.isClosing else { return }
        if subscriber.pending == nil {
            subscriber.pending = PendingCue(table: table, origin: origin, since: receivedAt)
            dirty.append(subscriber)
        } else {
            subscriber.pending!.merge(table: table, origin: origin)
            metrics.cueCoalesced()
        }
    }

    private func flush() {
        // A broadcast gives thousands of streams the same cue: encode it once.
        var last: (cue: PendingCue, json: [UInt8])?
        // A stream the peer is closing (not yet reported) takes nothing.
        for subscriber in dirty where subscriber.isWritable && subscriber.stream.unsentBytes == 0 {
            guard let pending = subscriber.pending else { continue }
            let json: [UInt8]
            if let last, last.cue.sameMessage(as: pending) {
                json = last.json
            } else {
                json = pending.message
                last = (pending, json)
            }
            send(json, pending: pending, to: subscriber)
        }
        // Streams with bytes still waiting keep their pending cue until `onWritable`.
        dirty.removeAll(keepingCapacity: true)
    }

    private func sendPending(_ subscriber: StreamSubscriber) {
        guard let pending = subscriber.pending, subscriber.isWritable else { return }
        send(pending.message, pending: pending, to: subscriber)
    }

    private func send(_ json: [UInt8], pending: PendingCue, to subscriber: StreamSubscriber) {
        subscriber.pending = nil
        subscriber.stream.send(type: "cue", json: json)
        metrics.cueSent(latencyNanoseconds: MonotonicClock.now() &- pending.since)
        if subscriber.stream.unsentBytes > settings.maxUnsentBytes { close(subscriber, .tooSlow) }
    }

    private func forEachStream(_ body: (StreamSubscriber) -> Void) {
        for streams in streamsByUser.values {
            for subscriber in streams { body(subscriber) }
        }
    }

    // MARK: - Revocation

    /// Closes the streams of a revoked session: `4004` when the account was deleted
    /// (every stream of the user), `4003` otherwise.
    func revoke(_ revocation: Revocation) {
        let deleted = revocation.reason == "account_deleted"
        let reason: StreamCloseReason = deleted ? .accountDeleted : .sessionRevoked
        var matches: [StreamSubscriber] = []
        if let user = revocation.userID {
            for subscriber in streamsByUser[user] ?? [] where deleted || subscriber.sessionID == revocation.sessionID {
                matches.append(subscriber)
            }
        } else {
            forEachStream { if $0.sessionID == revocation.sessionID { matches.append($0) } }
        }
        for subscriber in matches { close(subscriber, reason) }
    }

    // MARK: - The stream's own messages

    /// The in-band `{"type":"auth","access_token"}` extends a WebSocket stream with a
    /// fresh token of the same user and device. Other message types are ignored.
    private func received(_ message: UnsafeRawBufferPointer, from subscriber: StreamSubscriber) {
        var type: String?
        var token: String?
        let isObject = JSONObjectReader.forEachMember(in: message.assumingMemoryBound(to: UInt8.self)) {
            key, value in
            if key.equals("type"), case .string(let text) = value { type = text.decoded() }
            if key.equals("access_token"), case .string(let text) = value { token = text.decoded() }
            return true
        }
        guard isObject, type == "auth" else { return }
        guard let token else { return close(subscriber, code: 1008, reason: "access_token missing") }
        switch accounts.verifiedClaims(token: Substring(token)) {
        case .success(let claims) where claims.userID == subscriber.userID && claims.deviceID == subscriber.deviceID:
            subscriber.sessionID = claims.sessionID
            subscriber.expiresAt = accounts.tokens.acceptedUntil(claims)
            subscriber.hasWarned = false
            checkDeadlines(subscriber)
        case .success:
            close(subscriber, code: 1008, reason: "the token is another user's or device's")
        case .failure(let error) where error.code == "token_expired":
            close(subscriber, .tokenExpired)
        case .failure(let error) where error.code == "session_revoked":
            close(subscriber, .sessionRevoked)
        case .failure:
            close(subscriber, code: 1008, reason: "the access token is not valid")
        }
    }

    private func close(_ subscriber: StreamSubscriber, code: UInt16, reason: String) {
        guard !subscriber.isClosing else { return }
        subscriber.isClosing = true
        subscriber.stream.close(code: code, reason: reason)
    }

    // MARK: - Deadlines

    private func tick() {
        for (subscriber, _) in wheel.advance(to: loop.now) { checkDeadlines(subscriber) }
    }

    /// Does whatever is due for `subscriber` (expiry, the token warning, a heartbeat)
    /// and schedules its next deadline.
    private func checkDeadlines(_ subscriber: StreamSubscriber) {
        guard !subscriber.isClosing else { return }
        let now = loop.now
        let wallMilliseconds = Int(Date().timeIntervalSince1970 * 1000)
        // Saturating: the end is a client's token's, bounded by the token check but checked here too.
        let expiresInMilliseconds = subscriber.expiresAt.saturatingMultiply(1000).saturatingAdd(-wallMilliseconds)
        if expiresInMilliseconds <= 0 { return close(subscriber, .tokenExpired) }
        let warningMilliseconds = settings.tokenWarningSeconds * 1000
        if !subscriber.hasWarned && expiresInMilliseconds <= warningMilliseconds {
            subscriber.hasWarned = true
            subscriber.stream.send(
                type: "token_expiring", json: StreamMessage.tokenExpiring(inMilliseconds: expiresInMilliseconds))
        }
        if now >= subscriber.nextHeartbeat {
            subscriber.nextHeartbeat = now + UInt64(settings.heartbeatMilliseconds)
            let stalled = subscriber.stream.unsentBytes > 0
            // Bytes waiting at two heartbeats in a row, nothing taken in between: the
            // client reads nothing (or is gone).
            if stalled && subscriber.stalledAtLastHeartbeat && !subscriber.drainedSinceHeartbeat {
                return close(subscriber, .tooSlow)
            }
            subscriber.stalledAtLastHeartbeat = stalled
            subscriber.drainedSinceHeartbeat = false
            // A WebSocket that did not answer the previous ping is gone.
            if !stalled && !subscriber.stream.heartbeat() { return close(subscriber, .tooSlow) }
        }
        let expiry = now + UInt64(expiresInMilliseconds)
        var deadline = min(subscriber.nextHeartbeat, expiry)
        if !subscriber.hasWarned {
            deadline = min(deadline, now + UInt64(expiresInMilliseconds - warningMilliseconds))
        }
        wheel.schedule(subscriber, at: deadline)
    }

    // MARK: - Shutdown

    /// Sends every pending cue that can go, closes every stream `1001`, and calls
    /// `completion` once all are gone.
    func shutdown(completion: @escaping () -> Void) {
        isShuttingDown = true
        flush()
        guard streamCount > 0 else { return completion() }
        onLastStreamClosed = completion
        // Collected first: a close may report back (and leave the map) at once.
        var all: [StreamSubscriber] = []
        forEachStream { all.append($0) }
        for subscriber in all { close(subscriber, .goingAway) }
    }
}

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
