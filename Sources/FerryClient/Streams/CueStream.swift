import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One logical "pull now" stream to a Ferry gateway: connects, reconnects with jittered backoff
/// forever until stopped, watches for silence (no byte for 2 × heartbeat_ms → reconnect),
/// handles token_expiring (WebSocket: in-band auth; SSE: reconnect with a fresh token before in_ms),
/// and reports what the rest of the client must act on.
///
/// The policy is `CueStreamStateMachine`'s; this actor only carries out its actions:
/// it asks `accessToken` for tokens, opens and closes connections (SSE through
/// `URLSessionDataDelegate`, one URLSession per connection; WebSocket only on Apple
/// platforms), and keeps one timer for the machine's next deadline. Call ``stop()``
/// before letting go of it: until then its connection and timer hold it.
public actor CueStream {
    /// What the rest of the client must act on.
    public enum Event: Sendable, Equatable {
        /// Every (re)connect: the client must pull (cues sent while it was away are not replayed).
        case opened
        /// Something the user may read changed in `tables` (empty: anything may have), raw:
        /// the client skips a cue whose `origin` is its own device id, and pulls otherwise.
        case cue(tables: [String], origin: String?)
        /// The connection went away (or could not be made); a reconnect is scheduled. Transient.
        case disconnected(reason: String)
        /// The server ended the session: `4003` session_revoked or `4004` account_deleted.
        /// Sign out locally; the stream stays down until ``CueStream/start()``.
        case sessionEnded(code: Int)
    }

    /// Where the stream connects and how it retries.
    public struct Configuration: Sendable {
        /// Which transport carries the stream.
        public enum Transport: Sendable, Equatable {
            /// WebSocket where URLSession has it (Apple platforms, in builds that define
            /// `FERRY_CLIENT_WEBSOCKET`: the WebSocket path has not been run on a device
            /// yet), falling back to SSE for good once a WebSocket fails before it opened;
            /// SSE elsewhere.
            case automatic
            /// Server-Sent Events (`GET /v1/events`) on every platform.
            case serverSentEvents
            /// WebSocket (`GET /v1/stream`) with no fallback, on Apple platforms in builds
            /// that define `FERRY_CLIENT_WEBSOCKET`; SSE elsewhere (Linux's URLSession has
            /// no WebSocket).
            case webSocket
        }

        /// The gateway's base URL, e.g. `https://sync.example.com`.
        public var serverURL: URL
        /// The transport (``Transport/automatic`` unless given).
        public var transport: Transport
        /// The first reconnect waits a random time below this; each failure doubles it...
        public var backoffBase: Duration
        /// ...up to this. A connection that stayed open ``healthyAfter`` starts again from the base.
        public var backoffCap: Duration
        /// A connection that has not said `hello` this long after it was asked for is given up.
        public var openTimeout: Duration
        /// How long a connection must stay open to count as healthy.
        public var healthyAfter: Duration
        /// A number in [0, 1) for the backoff's full jitter (fixed in tests).
        public var random: @Sendable () -> Double

        /// A configuration for the gateway at `serverURL`.
        public init(
            serverURL: URL, transport: Transport = .automatic, backoffBase: Duration = .milliseconds(500),
            backoffCap: Duration = .seconds(30), openTimeout: Duration = .seconds(15),
            healthyAfter: Duration = .seconds(10),
            random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }
        ) {
            self.serverURL = serverURL
            self.transport = transport
            self.backoffBase = backoffBase
            self.backoffCap = backoffCap
            self.openTimeout = openTimeout
            self.healthyAfter = healthyAfter
            self.random = random
        }
    }

    private typealias Generation = CueStreamStateMachine.Generation

    private enum Input: Sendable {
        case tick
        case token(Generation, Result<String, any Error>)
        case connection(Generation, CueStreamConnectionEvent)
    }

    private struct WeakConnection {
        weak var connection: (any CueStreamConnection)?
    }

    /// The events, in order, for one consumer. If the consumer falls 1,024 events
    /// behind, the oldest are dropped (a later `.opened` or `.cue` asks for the same pull).
    public nonisolated let events: AsyncStream<Event>

    private let configuration: Configuration
    private let accessToken: @Sendable (_ forceRefresh: Bool) async throws -> String
    private let eventsContinuation: AsyncStream<Event>.Continuation
    private var machine: CueStreamStateMachine

    private var inputs: AsyncStream<Input>.Continuation?
    private var runner: Task<Void, Never>?
    private var timer: Task<Void, Never>?
    private var timerDeadline: ContinuousClock.Instant?
    private var tokenTasks: [Generation: Task<Void, Never>] = [:]
    private var connections: [Generation: any CueStreamConnection] = [:]
    private var closing: [any CueStreamConnection] = []
    private var made: [WeakConnection] = []

    /// A stream to `configuration.serverURL`, authenticated by `accessToken`:
    /// `accessToken(false)` returns the current token (refreshing it if near expiry),
    /// `accessToken(true)` forces a refresh (after a `4001`, or for a `token_expiring`).
    /// When it throws the stream backs off and asks again; it never signs out by itself.
    /// It should honour cancellation: ``stop()`` cancels it and waits for it.
    public init(
        configuration: Configuration, accessToken: @escaping @Sendable (_ forceRefresh: Bool) async throws -> String
    ) {
        self.configuration = configuration
        self.accessToken = accessToken
        (events, eventsContinuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(1024))
        var settings = CueStreamStateMachine.Settings(
            backoffBase: configuration.backoffBase, backoffCap: configuration.backoffCap,
            openTimeout: configuration.openTimeout, healthyAfter: configuration.healthyAfter,
            random: configuration.random)
        #if canImport(Darwin) && FERRY_CLIENT_WEBSOCKET
            settings.transport = configuration.transport == .serverSentEvents ? .serverSentEvents : .webSocket
            settings.fallsBackToServerSentEvents = configuration.transport == .automatic
        #else
            settings.transport = .serverSentEvents
        #endif
        machine = CueStreamStateMachine(settings: settings)
    }

    /// Starts connecting (a no-op while running); after a ``Event/sessionEnded(code:)``
    /// or ``stop()`` it starts afresh.
    public func start() {
        guard !machine.isRunning else { return }
        if inputs == nil {
            let (stream, continuation) = AsyncStream.makeStream(of: Input.self)
            inputs = continuation
            runner = Task { [weak self] in
                for await input in stream {
                    guard let self else { return }
                    await self.handle(input)
                }
            }
        }
        perform(machine.start(now: .now))
        armTimer()
    }

    /// Closes the connection and waits for every task and session of the stream to end;
    /// no event comes after it returns (until ``start()``).
    public func stop() async {
        perform(machine.stop())
        // Cancelled token requests stay in `tokenTasks` until they answer, so these are all of them.
        let tokenTasks = Array(self.tokenTasks.values)
        self.tokenTasks = [:]
        for task in tokenTasks { task.cancel() }
        let timer = self.timer
        timer?.cancel()
        self.timer = nil
        timerDeadline = nil
        inputs?.finish()
        inputs = nil
        let runner = self.runner
        self.runner = nil
        let closing = self.closing
        self.closing = []
        for task in tokenTasks { await task.value }
        await timer?.value
        await runner?.value
        for connection in closing { await connection.finished(timeout: .seconds(5)) }
    }

    // MARK: - For tests

    /// How many connections this stream made are still alive (held by anyone).
    var connectionsAlive: Int { made.filter { $0.connection != nil }.count }

    /// How many tasks of this stream exist: the input runner, the timer, token requests.
    var tasksAlive: Int { (runner == nil ? 0 : 1) + (timer == nil ? 0 : 1) + tokenTasks.count }

    // MARK: - Carrying out the machine's actions

    private func handle(_ input: Input) {
        let now = ContinuousClock.now
        switch input {
        case .tick:
            timer = nil
            timerDeadline = nil
            perform(machine.tick(now: now))
        case .token(let generation, .success(let token)):
            tokenTasks[generation] = nil
            perform(machine.tokenReady(generation: generation, token: token, now: now))
        case .token(let generation, .failure):
            tokenTasks[generation] = nil
            perform(machine.tokenFailed(generation: generation, now: now))
        case .connection(let generation, .received(let messages)):
            perform(machine.received(messages, generation: generation, now: now))
        case .connection(let generation, .ended(let ending)):
            perform(machine.ended(generation: generation, ending, now: now))
        }
        armTimer()
    }

    private func perform(_ actions: [CueStreamStateMachine.Action]) {
        for action in actions {
            switch action {
            case .fetchToken(let generation, let forceRefresh):
                guard let inputs else { continue }
                let accessToken = self.accessToken
                tokenTasks[generation]?.cancel()
                tokenTasks[generation] = Task {
                    let result: Result<String, any Error>
                    do {
                        result = .success(try await accessToken(forceRefresh))
                    } catch {
                        result = .failure(error)
                    }
                    inputs.yield(.token(generation, result))
                }
            case .open(let generation, let transport, let token):
                guard let inputs else { continue }
                let connection = makeConnection(transport, token: token) { event in
                    inputs.yield(.connection(generation, event))
                }
                connections[generation] = connection
                made.removeAll { $0.connection == nil }
                made.append(WeakConnection(connection: connection))
                connection.start()
            case .sendAuth(let generation, let token):
                connections[generation]?.sendAuth(token)
            case .sendPing(let generation):
                connections[generation]?.sendPing()
            case .close(let generation):
                // Cancelled, it still answers (and leaves `tokenTasks`) through `handle`.
                tokenTasks[generation]?.cancel()
                if let connection = connections.removeValue(forKey: generation) {
                    connection.close()
                    closing.removeAll { !$0.isAlive }
                    closing.append(connection)
                }
            case .emit(let event):
                eventsContinuation.yield(event)
            }
        }
    }

    private func makeConnection(
        _ transport: CueStreamStateMachine.Transport, token: String,
        report: @escaping @Sendable (CueStreamConnectionEvent) -> Void
    ) -> any CueStreamConnection {
        // The URLSession's own idle timeout is only a backstop behind the silence watchdog.
        let idleTimeout = Duration.seconds(300)
        #if canImport(Darwin) && FERRY_CLIENT_WEBSOCKET
            if transport == .webSocket {
                return WebSocketConnection(
                    url: endpoint("v1/stream", webSocket: true), token: token,
                    openTimeout: configuration.openTimeout, idleTimeout: idleTimeout, report: report)
            }
        #endif
        return ServerSentEventConnection(
            url: endpoint("v1/events", webSocket: false), token: token, openTimeout: configuration.openTimeout,
            idleTimeout: idleTimeout, report: report)
    }

    /// `path` under the server URL (keeping any path it has), as `ws`/`wss` for a WebSocket.
    private func endpoint(_ path: String, webSocket: Bool) -> URL {
        var components = URLComponents(url: configuration.serverURL, resolvingAgainstBaseURL: false) ?? URLComponents()
        let base = components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path
        components.path = base + "/" + path
        components.query = nil
        if webSocket { components.scheme = components.scheme == "https" ? "wss" : "ws" }
        return components.url ?? configuration.serverURL
    }

    private func armTimer() {
        guard let deadline = machine.deadline, let inputs else {
            timer?.cancel()
            timer = nil
            timerDeadline = nil
            return
        }
        if let armed = timerDeadline, armed <= deadline { return }
        timer?.cancel()
        timerDeadline = deadline
        timer = Task {
            do {
                try await Task.sleep(until: deadline, clock: .continuous)
                inputs.yield(.tick)
            } catch {}
        }
    }
}
