import FerryAuth
import FerryHTTP
import FerryLoop
import Foundation

/// One loop's open streams and the cues for them (docs/ARCHITECTURE.md, "Realtime: the
/// cue path"). Loop thread only.
///
/// The process's listener hands every loop each batch of notifications; the hub
/// finds the streams of each cue's user and marks them dirty, merging table names, so
/// a stream that cannot take bytes right now holds one pending cue, never a queue.
/// Here: the fan-out registry (streams by user, cues, revocations, shutdown). What each
/// stream's lifecycle asks for (`hello`, heartbeats, token warnings, expiry, stalls,
/// close codes) is its ``StreamLifecycle``'s to decide and CueHub+Lifecycle.swift's to
/// do, with one timer per loop (a ``TimingWheel``) for every stream's deadline, so an
/// idle stream costs no timer of its own; a stream's own messages are ``InBandAuth``'s.
final class CueHub {
    let loop: EventLoop
    let policy: StreamPolicy
    private let accounts: Accounts
    /// Counted by `StreamRoutes` before a stream opens; given back here when it is gone.
    private let quota: ConcurrencyLimit<UUID>
    private let metrics: LoopMetrics
    private var streamsByUser: [UUID: UserStreams] = [:]
    /// Each stream's next deadline (CueHub+Lifecycle.swift).
    var wheel: TimingWheel<StreamSubscriber>
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
        loop: EventLoop, policy: StreamPolicy, accounts: Accounts, quota: ConcurrencyLimit<UUID>, metrics: LoopMetrics
    ) {
        self.loop = loop
        self.policy = policy
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
        let lifecycle = StreamLifecycle(
            policy: policy, userID: claims.userID, sessionID: claims.sessionID,
            expiresAt: accounts.tokens.acceptedUntil(claims))
        let subscriber = StreamSubscriber(
            hub: self, stream: stream, deviceID: claims.deviceID, lifecycle: lifecycle)
        // Each callback captures the subscriber alone, so Swift needs no closure context
        // for it (three fewer allocations per stream). The stream holds them until it
        // reports its close, which lets go of all three (`EventStream.reportClosed`).
        stream.onClose = { [subscriber] in subscriber.hub.remove(subscriber) }
        stream.onWritable = { [subscriber] in
            subscriber.lifecycle.drained()
            if subscriber.pending != nil { subscriber.hub.sendPending(subscriber) }
        }
        stream.onMessage = { [subscriber] message in subscriber.hub.received(message, from: subscriber) }
        if let streams = streamsByUser[claims.userID] {
            streamsByUser[claims.userID] = streams.adding(subscriber)
        } else {
            streamsByUser[claims.userID] = .one(subscriber)
        }
        streamCount += 1
        metrics.streamOpened(stream.transport)
        if ticker == nil {
            let timer = FerryLoop.Timer(loop: loop)
            timer.start(after: wheel.tickMilliseconds, repeat: wheel.tickMilliseconds) { [unowned self] in tick() }
            ticker = timer
        }
        perform(subscriber.lifecycle.opened(now: instant), for: subscriber)
    }

    private func remove(_ subscriber: StreamSubscriber) {
        subscriber.lifecycle.closed()
        // Its deadline would keep the subscriber (and its stream and connection) until
        // the wheel reached it, and never while the loop has no stream to tick for.
        wheel.cancel(subscriber)
        quota.release(subscriber.userID)
        metrics.streamClosed(subscriber.stream.transport)
        streamCount -= 1
        if let streams = streamsByUser[subscriber.userID] {
            streamsByUser[subscriber.userID] = streams.removing(subscriber)
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

    /// Closes `subscriber`'s stream for `reason`, as its lifecycle asked (once).
    func close(_ subscriber: StreamSubscriber, _ reason: StreamCloseReason) {
        if reason == .tooSlow { metrics.streamTooSlow() }
        subscriber.stream.close(code: reason.code, reason: reason.text)
    }

    // MARK: - Cues

    /// Marks the streams each cue concerns and sends what their sockets can take now.
    func deliver(_ cues: [Cue]) {
        for cue in cues {
            let fresh = PendingCue(table: cue.table, origin: cue.origin, since: cue.receivedAt)
            switch cue.audience {
            case .user(let user):
                streamsByUser[user]?.each { mark($0, fresh) }
            case .everyone:
                forEachStream { mark($0, fresh) }
            }
        }
        flush()
    }

    /// Cues every stream with "anything may have changed": notifications sent while
    /// the listener was down are lost.
    func cueEveryStream() {
        let fresh = PendingCue(table: nil, origin: nil, since: MonotonicClock.now())
        forEachStream { mark($0, fresh) }
        flush()
    }

    /// Gives `subscriber` the one-notification cue `fresh`, or merges it into the cue
    /// it already owes.
    private func mark(_ subscriber: StreamSubscriber, _ fresh: PendingCue) {
        guard subscriber.lifecycle.isOpen else { return }
        if let pending = subscriber.pending {
            subscriber.pending = pending.merging(table: fresh.tables.first, origin: fresh.origin)
            metrics.cueCoalesced()
        } else {
            subscriber.pending = fresh
            dirty.append(subscriber)
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
        perform(subscriber.lifecycle.cueSent(unsentBytes: subscriber.stream.unsentBytes), for: subscriber)
    }

    private func forEachStream(_ body: (StreamSubscriber) -> Void) {
        for streams in streamsByUser.values { streams.each(body) }
    }

    // MARK: - The stream's own messages

    /// A client's message on `subscriber`'s stream: an in-band `auth` renews its token or
    /// closes it (``InBandAuth``); anything else is ignored.
    private func received(_ message: UnsafeRawBufferPointer, from subscriber: StreamSubscriber) {
        switch InBandAuth.read(message, userID: subscriber.userID, deviceID: subscriber.deviceID, accounts: accounts) {
        case .ignored:
            return
        case .renewed(let claims):
            let action = subscriber.lifecycle.tokenRenewed(
                sessionID: claims.sessionID, expiresAt: accounts.tokens.acceptedUntil(claims), now: instant,
                unsentBytes: subscriber.stream.unsentBytes)
            perform(action, for: subscriber)
        case .close(let reason):
            perform(subscriber.lifecycle.close(reason), for: subscriber)
        }
    }

    // MARK: - Revocation

    /// Closes the streams a revocation ends (``StreamLifecycle/revoked(_:)``): those of
    /// its user when it names one, else any.
    func revoke(_ revocation: Revocation) {
        var candidates: [StreamSubscriber] = []
        if let user = revocation.userID {
            streamsByUser[user]?.each { candidates.append($0) }
        } else {
            forEachStream { candidates.append($0) }
        }
        // Collected first: a close may report back (and leave the map) at once.
        for subscriber in candidates { perform(subscriber.lifecycle.revoked(revocation), for: subscriber) }
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
        for subscriber in all { perform(subscriber.lifecycle.shutdown(), for: subscriber) }
    }
}

/// One user's open streams on a loop. Nearly every user has one, which needs no array of
/// its own: an idle stream's share of the hub is then its dictionary entry alone.
private enum UserStreams {
    case one(StreamSubscriber)
    /// Two or more, in the order they opened.
    case many([StreamSubscriber])

    func adding(_ subscriber: StreamSubscriber) -> UserStreams {
        switch self {
        case .one(let first): return .many([first, subscriber])
        case .many(let all): return .many(all + [subscriber])
        }
    }

    /// Without `subscriber`; nil when none is left.
    func removing(_ subscriber: StreamSubscriber) -> UserStreams? {
        switch self {
        case .one(let only):
            return only === subscriber ? nil : self
        case .many(var all):
            all.removeAll { $0 === subscriber }
            guard all.count > 1 else { return all.first.map { .one($0) } }
            return .many(all)
        }
    }

    func each(_ body: (StreamSubscriber) -> Void) {
        switch self {
        case .one(let only): body(only)
        case .many(let all): for subscriber in all { body(subscriber) }
        }
    }
}
