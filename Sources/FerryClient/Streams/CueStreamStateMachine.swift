/// The cue stream's policy, with no socket, clock or randomness of its own: ``CueStream``
/// feeds it what happened (with the time) and carries out the ``Action``s it returns,
/// and calls ``tick(now:)`` at ``deadline``.
///
/// ```
/// idle ─start→ connecting(g) ─hello→ open(g) ─close, silence→ backoff ─delay→ connecting(g+1) …
///                   │ refused, no hello in time          ↑            │ 4003, 4004
///                   └─────────────────────────────────────┘            └→ ended (sessionEnded)
/// any ─stop→ stopped
/// ```
///
/// Every connection gets a new generation; whatever arrives for another generation than
/// the live ones (a late chunk of a connection already torn down) is ignored. On SSE a
/// `token_expiring` opens a *renewal*, a second connection with a fresh token, while
/// the first keeps serving; once the renewal says `hello` the first is closed, so no
/// moment is without a stream.
struct CueStreamStateMachine: Sendable {
    typealias Instant = ContinuousClock.Instant
    typealias Generation = UInt64

    /// How a connection carries the stream.
    enum Transport: Sendable, Equatable {
        case serverSentEvents, webSocket
    }

    /// What the stream must do now.
    enum Action: Sendable, Equatable {
        /// Ask for an access token (forcing a refresh when `forceRefresh`), then report
        /// ``tokenReady(generation:token:now:)`` or ``tokenFailed(generation:now:)``.
        case fetchToken(Generation, forceRefresh: Bool)
        /// Open connection `generation` over `transport` with `token`.
        case open(Generation, Transport, token: String)
        /// WebSocket: send `{"type":"auth","access_token":token}` on `generation`.
        case sendAuth(Generation, token: String)
        /// WebSocket: send a ping on `generation` (its pong proves the connection alive:
        /// URLSession does not show the server's pings).
        case sendPing(Generation)
        /// Tear connection `generation` down (idempotent).
        case close(Generation)
        /// Report `event` to the stream's consumer.
        case emit(CueStream.Event)
    }

    /// How a connection ended.
    enum Ending: Sendable, Equatable {
        /// A close frame (WebSocket) with its code (nil when it had none) and reason.
        case closed(code: Int?, reason: String?)
        /// The server answered the request with `status` (not a stream): `code` is the
        /// error body's `error.code`, `retryAfter` its `Retry-After`.
        case refused(status: Int, code: String?, retryAfter: Duration?)
        /// The connection failed or ended without saying why.
        case failed(String)
    }

    /// The policy's numbers.
    struct Settings: Sendable {
        /// The first reconnect waits up to this long; each failure doubles it...
        var backoffBase: Duration = .milliseconds(500)
        /// ...up to this.
        var backoffCap: Duration = .seconds(30)
        /// A connection that has not said `hello` this long after it was asked for
        /// (its token included) is given up.
        var openTimeout: Duration = .seconds(15)
        /// A connection open this long was healthy: the backoff starts again from the base.
        var healthyAfter: Duration = .seconds(10)
        /// The transport tried first.
        var transport: Transport = .serverSentEvents
        /// Whether a WebSocket that fails before `hello` makes the stream use SSE from then on.
        var fallsBackToServerSentEvents = true
        /// A number in [0, 1), for the full jitter (injected so tests can fix it).
        var random: @Sendable () -> Double = { Double.random(in: 0..<1) }
    }

    private struct Attempt: Sendable {
        var generation: Generation
        var transport: Transport
        var startedAt: Instant
    }

    private struct Connection: Sendable {
        var generation: Generation
        var transport: Transport
        var openedAt: Instant
        var lastByteAt: Instant
        var heartbeat: Duration
        var nextPingAt: Instant?
        var fetchingAuthToken = false
        var silenceLimit: Duration { heartbeat * 2 }
    }

    private enum Phase: Sendable {
        case idle
        case connecting(Attempt)
        case open(Connection)
        case backoff(until: Instant, forceRefresh: Bool)
        /// The server ended the session (4003, 4004): nothing reconnects until ``start(now:)``.
        case ended
        case stopped
    }

    let settings: Settings
    private var phase: Phase = .idle
    /// SSE: a connection with a fresh token opening beside the open one.
    private var renewal: Attempt?
    /// SSE: when to try the renewal again after one failed (while the old stream lasts).
    private var renewAt: Instant?
    private var failures = 0
    private var lastGeneration: Generation = 0
    private var transport: Transport

    init(settings: Settings = Settings()) {
        self.settings = settings
        transport = settings.transport
    }

    // MARK: - What the stream reads

    /// When ``tick(now:)`` must be called next, or nil when nothing is due.
    var deadline: Instant? {
        var candidates: [Instant] = []
        switch phase {
        case .connecting(let attempt): candidates.append(attempt.startedAt + settings.openTimeout)
        case .open(let connection):
            candidates.append(connection.lastByteAt + connection.silenceLimit)
            if let ping = connection.nextPingAt { candidates.append(ping) }
            if let renewal { candidates.append(renewal.startedAt + settings.openTimeout) }
            if let renewAt { candidates.append(renewAt) }
        case .backoff(let until, _): candidates.append(until)
        case .idle, .ended, .stopped: break
        }
        return candidates.min()
    }

    /// Whether the stream is meant to run (started, not stopped, its session not ended).
    var isRunning: Bool {
        switch phase {
        case .idle, .ended, .stopped: false
        case .connecting, .open, .backoff: true
        }
    }

    /// The generation of the open connection, if one is open.
    var openGeneration: Generation? {
        if case .open(let connection) = phase { connection.generation } else { nil }
    }

    // MARK: - Inputs

    /// Starts connecting (a no-op while running).
    mutating func start(now: Instant) -> [Action] {
        guard !isRunning else { return [] }
        failures = 0
        transport = settings.transport
        return connect(forceRefresh: false, now: now)
    }

    /// Stops for good (until ``start(now:)``): every live connection is closed and
    /// nothing that arrives afterwards is acted on. Wins over everything.
    mutating func stop() -> [Action] {
        let live = liveGenerations
        phase = .stopped
        renewal = nil
        renewAt = nil
        return live.map { .close($0) }
    }

    /// The token asked for by ``Action/fetchToken(_:forceRefresh:)`` arrived.
    mutating func tokenReady(generation: Generation, token: String, now: Instant) -> [Action] {
        switch phase {
        case .connecting(let attempt) where attempt.generation == generation:
            return [.open(generation, attempt.transport, token: token)]
        case .open(var connection) where connection.generation == generation && connection.fetchingAuthToken:
            connection.fetchingAuthToken = false
            phase = .open(connection)
            return [.sendAuth(generation, token: token)]
        case .open where renewal?.generation == generation:
            return [.open(generation, .serverSentEvents, token: token)]
        default:
            return []
        }
    }

    /// The token could not be had: back off (a renewal or an in-band auth gives up
    /// quietly; the open stream serves until its end).
    mutating func tokenFailed(generation: Generation, now: Instant) -> [Action] {
        switch phase {
        case .connecting(let attempt) where attempt.generation == generation:
            return backOff(forceRefresh: false, retryAfter: nil, reason: "no access token", now: now)
        case .open(var connection) where connection.generation == generation && connection.fetchingAuthToken:
            connection.fetchingAuthToken = false
            phase = .open(connection)
            return []
        case .open where renewal?.generation == generation:
            return renewalFailed(now: now)
        default:
            return []
        }
    }

    /// Bytes arrived on `generation` (a heartbeat among them), with the messages they completed.
    mutating func received(_ messages: [CueStreamMessage], generation: Generation, now: Instant) -> [Action] {
        var actions: [Action] = []
        for message in messages {
            actions += receive(message, generation: generation, now: now)
        }
        if case .open(var connection) = phase, connection.generation == generation {
            connection.lastByteAt = now
            phase = .open(connection)
        }
        return actions
    }

    /// Connection `generation` ended.
    mutating func ended(generation: Generation, _ ending: Ending, now: Instant) -> [Action] {
        switch phase {
        case .connecting(let attempt) where attempt.generation == generation:
            return attemptFailed(attempt, ending, now: now)
        case .open(let connection) where connection.generation == generation:
            return lost(connection, ending, now: now)
        case .open where renewal?.generation == generation:
            if case .sessionEnded(let code) = verdict(ending) { return endSession(code: code) }
            return renewalFailed(now: now)
        default:
            return []
        }
    }

    /// Time passed: carries out whatever fell due by `now`.
    mutating func tick(now: Instant) -> [Action] {
        switch phase {
        case .connecting(let attempt) where now >= attempt.startedAt + settings.openTimeout:
            return attemptFailed(attempt, .failed("no hello within \(settings.openTimeout)"), now: now)
        case .open(var connection):
            if now >= connection.lastByteAt + connection.silenceLimit {
                return lost(connection, .failed("silent for \(connection.silenceLimit)"), now: now)
            }
            var actions: [Action] = []
            if let renewal, now >= renewal.startedAt + settings.openTimeout {
                actions += renewalFailed(now: now)
            }
            if let renewAt, renewal == nil, now >= renewAt {
                actions += startRenewal(now: now)
            }
            if let ping = connection.nextPingAt, now >= ping {
                connection.nextPingAt = now + connection.heartbeat
                phase = .open(connection)
                actions.append(.sendPing(connection.generation))
            }
            return actions
        case .backoff(let until, let forceRefresh) where now >= until:
            return connect(forceRefresh: forceRefresh, now: now)
        default:
            return []
        }
    }

    // MARK: - Transitions

    private mutating func receive(_ message: CueStreamMessage, generation: Generation, now: Instant) -> [Action] {
        switch (phase, message) {
        case (.connecting(let attempt), .hello(let heartbeat)) where attempt.generation == generation:
            open(attempt, heartbeatMilliseconds: heartbeat, now: now)
            return [.emit(.opened)]
        case (.open(let old), .hello(let heartbeat)) where renewal?.generation == generation:
            // The renewal took over: the old stream goes, and the client pulls as after any open.
            open(renewal!, heartbeatMilliseconds: heartbeat, now: now)
            renewal = nil
            renewAt = nil
            return [.close(old.generation), .emit(.opened)]
        case (.open(let connection), _) where connection.generation == generation:
            break
        default:
            return []
        }
        guard case .open(var connection) = phase else { return [] }
        switch message {
        case .hello, .other:
            return []
        case .cue(let tables, let origin):
            return [.emit(.cue(tables: tables, origin: origin))]
        case .tokenExpiring:
            switch connection.transport {
            case .webSocket:
                guard !connection.fetchingAuthToken else { return [] }
                connection.fetchingAuthToken = true
                phase = .open(connection)
                return [.fetchToken(connection.generation, forceRefresh: true)]
            case .serverSentEvents:
                guard renewal == nil else { return [] }
                return startRenewal(now: now)
            }
        case .closed(let code, let reason):
            return lost(connection, .closed(code: code, reason: reason), now: now)
        }
    }

    private mutating func open(_ attempt: Attempt, heartbeatMilliseconds: Int, now: Instant) {
        let heartbeat = Duration.milliseconds(heartbeatMilliseconds)
        phase = .open(
            Connection(
                generation: attempt.generation, transport: attempt.transport, openedAt: now, lastByteAt: now,
                heartbeat: heartbeat, nextPingAt: attempt.transport == .webSocket ? now + heartbeat : nil))
    }

    private mutating func connect(forceRefresh: Bool, now: Instant) -> [Action] {
        let generation = nextGeneration()
        phase = .connecting(Attempt(generation: generation, transport: transport, startedAt: now))
        return [.fetchToken(generation, forceRefresh: forceRefresh)]
    }

    private mutating func startRenewal(now: Instant) -> [Action] {
        let generation = nextGeneration()
        renewal = Attempt(generation: generation, transport: .serverSentEvents, startedAt: now)
        renewAt = nil
        return [.fetchToken(generation, forceRefresh: true)]
    }

    private mutating func renewalFailed(now: Instant) -> [Action] {
        let failed = renewal.map { [Action.close($0.generation)] } ?? []
        renewal = nil
        renewAt = now + jitteredDelay()
        return failed
    }

    private mutating func attemptFailed(_ attempt: Attempt, _ ending: Ending, now: Instant) -> [Action] {
        let verdict = verdict(ending)
        if case .sessionEnded(let code) = verdict { return endSession(code: code) }
        if attempt.transport == .webSocket && settings.fallsBackToServerSentEvents {
            // Apple's URLSession may lack WebSocket, or a proxy may refuse the upgrade: SSE from now on.
            transport = .serverSentEvents
            if case .refused = ending {
            } else {
                return [.close(attempt.generation), .emit(.disconnected(reason: describe(ending)))]
                    + connect(forceRefresh: false, now: now)
            }
        }
        var retryAfter: Duration?
        if case .refused(_, _, let after) = ending { retryAfter = after }
        return [.close(attempt.generation)]
            + backOff(
                forceRefresh: verdict == .refreshAndReconnect, retryAfter: retryAfter, reason: describe(ending),
                now: now)
    }

    private mutating func lost(_ connection: Connection, _ ending: Ending, now: Instant) -> [Action] {
        let verdict = verdict(ending)
        if case .sessionEnded(let code) = verdict { return endSession(code: code) }
        if now - connection.openedAt >= settings.healthyAfter { failures = 0 }
        let reason = describe(ending)
        if let renewal {
            // The renewal already has a fresh token: it becomes the connection being opened.
            phase = .connecting(renewal)
            self.renewal = nil
            renewAt = nil
            return [.close(connection.generation), .emit(.disconnected(reason: reason))]
        }
        renewAt = nil
        return [.close(connection.generation)]
            + backOff(forceRefresh: verdict == .refreshAndReconnect, retryAfter: nil, reason: reason, now: now)
    }

    private mutating func endSession(code: Int) -> [Action] {
        let live = liveGenerations
        phase = .ended
        renewal = nil
        renewAt = nil
        return live.map { .close($0) } + [.emit(.sessionEnded(code: code))]
    }

    private mutating func backOff(forceRefresh: Bool, retryAfter: Duration?, reason: String, now: Instant)
        -> [Action]
    {
        var delay = jitteredDelay()
        if let retryAfter { delay = max(delay, min(retryAfter, settings.backoffCap)) }
        phase = .backoff(until: now + delay, forceRefresh: forceRefresh)
        return [.emit(.disconnected(reason: reason))]
    }

    /// Full jitter: a uniform delay in [0, min(cap, base × 2^failures)); then one more failure.
    private mutating func jitteredDelay() -> Duration {
        let ceiling = min(settings.backoffCap, settings.backoffBase * (1 << min(failures, 20)))
        failures = min(failures + 1, 64)
        let random = settings.random()
        let fraction = random.isFinite ? min(max(random, 0), 1) : 0
        return ceiling * fraction
    }

    private func verdict(_ ending: Ending) -> CueStreamCloseVerdict {
        switch ending {
        case .closed(let code, let reason): CueStreamCloseVerdict(code: code, reason: reason)
        case .refused(let status, let code, _): CueStreamCloseVerdict(refusedWith: status, code: code)
        case .failed: .reconnect
        }
    }

    private func describe(_ ending: Ending) -> String {
        switch ending {
        case .closed(let code, let reason):
            "closed \(code.map(String.init) ?? "without a code")\(reason.map { " \($0)" } ?? "")"
        case .refused(let status, let code, _): "refused \(status)\(code.map { " \($0)" } ?? "")"
        case .failed(let text): text
        }
    }

    private var liveGenerations: [Generation] {
        var live: [Generation] = []
        switch phase {
        case .connecting(let attempt): live.append(attempt.generation)
        case .open(let connection): live.append(connection.generation)
        case .idle, .backoff, .ended, .stopped: break
        }
        if let renewal { live.append(renewal.generation) }
        return live
    }

    private mutating func nextGeneration() -> Generation {
        lastGeneration += 1
        return lastGeneration
    }
}
