import FerryAuth
import FerryHTTP
import FerryLoop
import FerryPostgres
import Foundation
import Synchronization

/// The running gateway: event loops, the HTTP server on every loop, one database
/// pool per loop and the process's LISTEN connection.
///
/// `ferry serve` and `ferry dev` call ``serve(_:)``; tests start and stop a
/// gateway in-process with ``start()`` and ``shutdown()``.
public final class Gateway: Sendable {
    /// What the gateway was started with.
    public let configuration: GatewayConfiguration
    /// Where log lines go.
    public let logger: Logger
    let group: LoopGroup
    let workers: [LoopBound<Worker>]
    private let server: HTTPServer
    private let listener: LoopBound<Listener>
    private let listenerStatus = ListenerStatus()
    /// The in-process tombstone purge on loop 0, when configured.
    private let purger: LoopBound<TombstonePurger>?
    let accounts: Accounts
    /// Requests in flight per device and per user, for every loop.
    let requests: RequestsInFlight

    /// The channel the cue triggers of registered tables notify (sql/ferry/functions/cues.sql).
    static let cueChannel = "ferry_cue"
    /// The channel account functions notify when they revoke a session.
    static let revocationChannel = "ferry_revoked"

    /// Builds every part; nothing is bound or connected until ``start()``.
    public init(configuration: GatewayConfiguration, logger: Logger) throws {
        self.configuration = configuration
        self.logger = logger
        var requestDatabase = try PostgresConfiguration(
            configuration.databaseURL, applicationName: "ferry",
            statementTimeoutMilliseconds: configuration.statementTimeoutMilliseconds)
        // Every time the API returns is UTC, whatever TimeZone the server, database or role sets.
        requestDatabase.timeZone = "UTC"
        let database = requestDatabase
        let listenDatabase = try PostgresConfiguration(
            configuration.listenDatabaseURL, applicationName: "ferry-listener")
        let group = LoopGroup(count: configuration.threads)
        self.group = group
        let accounts = Accounts(configuration: configuration, logger: logger)
        self.accounts = accounts
        let streamSettings = CueHub.Settings(
            heartbeatMilliseconds: configuration.streamHeartbeatMilliseconds,
            tokenWarningSeconds: configuration.streamTokenWarningSeconds,
            maxUnsentBytes: configuration.streamMaxUnsentBytes)
        let quota = ConcurrencyLimit<UUID>(limit: configuration.streamsPerUser)
        let requests = RequestsInFlight(
            perDevice: configuration.requestsPerDevice, perUser: configuration.requestsPerUser,
            pushBytesPerSecond: configuration.pushBytesPerSecond)
        self.requests = requests
        let made = Mutex<[Int: LoopBound<Worker>]>([:])
        group.onEveryLoop { loop in
            let pool = PostgresPool(loop: loop, configuration: database, maxConnections: configuration.poolSize)
            let worker = Worker(
                loop: loop, pool: pool, logger: logger, streams: streamSettings, accounts: accounts, quota: quota,
                requests: requests)
            let index = group.loops.firstIndex { $0 === loop }!
            made.withLock { $0[index] = LoopBound(worker, loop: loop) }
        }
        let workers = made.withLock { made in group.loops.indices.map { made[$0]! } }
        self.workers = workers
        let listenerLoop = group.loops[0]
        purger = configuration.purgeTombstonesEverySeconds.map { every in
            LoopBound(
                sending: TombstonePurger(
                    worker: workers[0], logger: logger, everySeconds: every,
                    retentionSeconds: configuration.tombstoneRetentionSeconds),
                loop: workers[0].loop)
        }
        listener = LoopBound(
            sending: Listener(
                loop: listenerLoop, configuration: listenDatabase, channels: [Self.cueChannel, Self.revocationChannel]),
            loop: listenerLoop)
        var limits = HTTPLimits()
        limits.maxBodyBytes = configuration.maxBodyBytes
        limits.maxUnsentBytes = configuration.maxUnsentBytes
        var http = HTTPServerConfiguration(
            host: configuration.host, port: configuration.port, limits: limits,
            headTimeout: .seconds(configuration.headerTimeoutSeconds),
            idleTimeout: .seconds(configuration.idleTimeoutSeconds))
        http.sharesPort = configuration.sharesPort
        let routes = OperationsRoutes(workers: workers, listenerStatus: listenerStatus, logger: logger)
        let accountRoutes = AccountRoutes(accounts: accounts)
        let syncRoutes = SyncRoutes(
            accounts: accounts, maxPushMutations: configuration.maxPushMutations,
            cursors: PullCursorSealer(configuration: configuration))
        let streamRoutes = StreamRoutes(
            accounts: accounts, maxMessageBytes: configuration.streamMaxMessageBytes, quota: quota)
        server = HTTPServer(
            configuration: http, group: group,
            observer: { loop in workers.first { $0.loop === loop }!.value },
            router: { loop in
                var router = Router()
                let worker = workers.first { $0.loop === loop }!.value
                routes.register(in: &router, worker: worker)
                accountRoutes.register(in: &router, worker: worker)
                syncRoutes.register(in: &router, worker: worker)
                LockRoutes(accounts: accounts).register(in: &router, worker: worker)
                streamRoutes.register(in: &router, worker: worker)
                return router
            })
    }

    /// Whether the LISTEN connection is up (for `/readyz`). Safe from any thread.
    public var isListenerConnected: Bool { listenerStatus.isConnected }

    /// Starts serving, then connects the listener; returns the bound address. An
    /// address that cannot be served throws before the listener connects.
    @discardableResult
    public func start() throws -> SocketAddress {
        // A peer that closes while we write must be an EPIPE error, not a signal that kills us.
        signal(SIGPIPE, SIG_IGN)
        let address = try server.start()
        let listener = self.listener
        let logger = self.logger
        let status = listenerStatus
        let accounts = self.accounts
        let workers = self.workers
        let worker = workers[0]
        listener.loop.execute {
            let connection = listener.value
            let cues = CueBatcher(loop: listener.loop, workers: workers, status: status, logger: logger)
            connection.onStateChange = { state in
                let connected = state == .connected
                status.isConnected = connected
                logger.log(connected ? .info : .warning, connected ? "listener connected" : "listener disconnected")
                // Revocations announced while nobody listened would be lost: reload them.
                if connected { Self.reloadRevocations(worker.value, accounts) }
            }
            connection.onGap = {
                status.reconnected()
                // Cues sent while nobody listened are lost: every stream pulls.
                for worker in workers { worker.loop.execute { worker.value.hub.cueEveryStream() } }
            }
            connection.onNotification = { notification in
                if notification.channel == Self.cueChannel {
                    cues.add(notification.payload)
                } else if notification.channel == Self.revocationChannel,
                    let revocation = accounts.noteRevocation(payload: notification.payload)
                {
                    for worker in workers { worker.loop.execute { worker.value.hub.revoke(revocation) } }
                }
            }
            connection.start()
        }
        if let purger {
            purger.loop.execute { purger.value.start() }
        }
        return address
    }

    /// Runs the schema check on the first loop's pool until it passes, `seconds` pass,
    /// or `interruption` ends the wait (a signal), one attempt a second; logs what it
    /// waits for once per change. Call off the loops.
    func waitForDatabase(seconds: Int, interruption: StartupInterruption) -> SchemaCheck {
        let deadline = ContinuousClock.now + .seconds(seconds)
        var reported: SchemaCheck?
        while true {
            let check = checkSchema()
            let remaining = deadline - ContinuousClock.now
            if check == .ready || interruption.isInterrupted || remaining <= .zero { return check }
            if check != reported {
                logger.log(.warning, "waiting for the database", ["reason": check.advice, "wait_s": String(seconds)])
                reported = check
            }
            interruption.sleep(min(remaining, .seconds(1)))
        }
    }

    /// One schema check on the first loop's pool, waited for.
    private func checkSchema() -> SchemaCheck {
        let answer = Mutex<SchemaCheck?>(nil)
        let done = DispatchSemaphore(value: 0)
        let worker = workers[0]
        worker.loop.execute {
            SchemaCheck.run(on: worker.value.pool) { check in
                answer.withLock { $0 = check }
                done.signal()
            }
        }
        done.wait()
        return answer.withLock { $0! }
    }

    /// Replaces the revoked-session cache with every revocation young enough to matter.
    private static func reloadRevocations(_ worker: Worker, _ accounts: Accounts) {
        let statement = PostgresStatement(
            """
            select session_id, extract(epoch from revoked_at)::bigint
            from ferry.recent_revocations(now() - make_interval(secs => $1))
            """, [String(accounts.revocationHorizonSeconds)], preparedName: "ferry_recent_revocations")
        worker.pool.query(statement) { result in
            switch result {
            case .success(let rows):
                accounts.revoked.replaceAll(
                    with: rows.rows.compactMap { row in
                        guard let id = row[0].flatMap(UUID.init(uuidString:)), let at = row[1].flatMap(Int.init)
                        else { return nil }
                        return (sessionID: id, until: at + accounts.revocationHorizonSeconds)
                    })
            case .failure(let error):
                accounts.logger.log(.warning, "could not reload revoked sessions", ["error": error.description])
            }
        }
    }

    /// Stops accepting, lets requests in flight finish until the shutdown timeout,
    /// then closes pools and the listener and stops the loops.
    public func shutdown() async {
        let deadline = ContinuousClock.now + .seconds(configuration.shutdownTimeoutSeconds)
        // Streams are not the HTTP server's (taken over): each loop's hub sends what is
        // pending and closes them 1001 while requests in flight finish.
        async let streamsClosed: Void = withTaskGroup(of: Void.self) { group in
            for worker in workers {
                group.addTask {
                    await withCheckedContinuation { continuation in
                        worker.loop.execute { worker.value.hub.shutdown { continuation.resume() } }
                    }
                }
            }
        }
        await server.shutdown(deadline: deadline)
        await streamsClosed
        listener.loop.execute { [listener] in listener.value.stop() }
        if let purger {
            await withCheckedContinuation { continuation in
                purger.loop.execute {
                    purger.value.close()
                    continuation.resume()
                }
            }
        }
        for worker in workers {
            await withCheckedContinuation { continuation in
                worker.loop.execute {
                    worker.value.close()
                    continuation.resume()
                }
            }
        }
        accounts.passwords.close()
        group.stopAndWait()
    }

    /// Runs a gateway until SIGINT or SIGTERM, then shuts it down gracefully.
    /// Returns the process exit status: 0 after a graceful stop, 1 when it could not
    /// start, 2 when its address is taken or not this machine's (a setting to change).
    public static func serve(_ configuration: GatewayConfiguration) -> Int32 {
        // Until they are watched, SIGINT and SIGTERM must wait rather than take their
        // default action (ending the process, perhaps with connections open): they stay
        // blocked, in the loop threads too (threads inherit the mask), until the watchers
        // exist. Then this thread unblocks them and takes any that came meanwhile (a
        // parent may have blocked them before exec: Foundation's Process does); libuv's
        // handler hands it to the watching loop.
        var shutdownSignals = sigset_t()
        sigemptyset(&shutdownSignals)
        sigaddset(&shutdownSignals, SIGINT)
        sigaddset(&shutdownSignals, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &shutdownSignals, nil)
        let logger = Logger(format: configuration.logFormat, minimumLevel: configuration.logLevel)
        let gateway: Gateway
        do {
            gateway = try Gateway(configuration: configuration, logger: logger)
        } catch {
            logger.log(.error, "could not start", ["error": "\(error)"])
            return 1
        }
        let stopped = DispatchSemaphore(value: 0)
        let interruption = StartupInterruption()
        // A signal that comes before the server is up waits for it (an HTTPServer shut
        // down before it started could not start), unless the database is not ready:
        // then it ends the wait for the database.
        let signals = ShutdownSignals.install(on: gateway.group.loops[0], whileStarting: interruption.interrupt) {
            signal in
            logger.log(
                .info, "shutting down",
                ["signal": String(signal), "deadline_s": String(configuration.shutdownTimeoutSeconds)])
            Task {
                await gateway.shutdown()
                logger.log(.info, "stopped")
                stopped.signal()
            }
        } exitAtOnce: { signal in
            logger.log(.warning, "second signal: exiting at once", ["signal": String(signal)])
            exit(1)
        }
        pthread_sigmask(SIG_UNBLOCK, &shutdownSignals, nil)
        // Stops what started before serving, so that the process exits with no loop
        // running: exit() while loop threads run raced with their work (SIGABRT).
        func stopBeforeServing(_ status: Int32) -> Int32 {
            let done = DispatchSemaphore(value: 0)
            Task {
                await gateway.shutdown()
                done.signal()
            }
            done.wait()
            return status
        }
        let check = gateway.waitForDatabase(seconds: configuration.databaseWaitSeconds, interruption: interruption)
        guard check == .ready else {
            if interruption.isInterrupted {
                logger.log(.info, "stopped before serving", ["reason": check.advice])
                return stopBeforeServing(0)
            }
            logger.log(.error, "could not start", ["error": check.advice])
            return stopBeforeServing(1)
        }
        let address: SocketAddress
        do {
            address = try gateway.start()
        } catch {
            let (message, status) = startFailure(error, configuration)
            logger.log(.error, "could not start", ["error": message])
            return stopBeforeServing(status)
        }
        logger.log(
            .info, "serving",
            [
                "listen": address.description, "threads": String(configuration.threads),
                "version": Ferry.version, "commit": Ferry.commit ?? "unknown",
            ])
        signals.loop.execute { signals.value.serving() }
        withExtendedLifetime(signals) { stopped.wait() }
        return 0
    }
}

/// What to log when the server could not start, and the exit status: 2 for an
/// address this process cannot serve (a setting to change), 1 otherwise.
func startFailure(_ error: any Error, _ configuration: GatewayConfiguration) -> (message: String, status: Int32) {
    let listen =
        configuration.host.contains(":")
        ? "[\(configuration.host)]:\(configuration.port)" : "\(configuration.host):\(configuration.port)"
    guard let error = error as? LoopError else { return ("\(error)", 1) }
    switch -error.code {
    case EADDRINUSE:
        return (
            "\(listen) is already served by another process: stop it, choose another --listen / FERRY_LISTEN, "
                + "or pass --share-port / FERRY_SHARE_PORT=true to share the address with it on purpose", 2
        )
    case EADDRNOTAVAIL:
        return ("\(listen) is not an address of this machine (--listen / FERRY_LISTEN)", 2)
    case EACCES:
        return (
            "may not bind \(listen): ports below 1024 need root or CAP_NET_BIND_SERVICE (--listen / FERRY_LISTEN)", 2
        )
    default:
        return ("\(error)", 1)
    }
}

/// Ends `serve`'s wait for its database early: set by a signal that arrives before
/// the gateway serves. Any thread.
final class StartupInterruption: Sendable {
    private let interrupted = Atomic<Bool>(false)
    private let wakeUp = DispatchSemaphore(value: 0)

    /// Whether a signal came.
    var isInterrupted: Bool { interrupted.load(ordering: .acquiring) }

    /// Records the signal and wakes a ``sleep(_:)`` in progress.
    @Sendable func interrupt(_ signal: Int32) {
        interrupted.store(true, ordering: .releasing)
        wakeUp.signal()
    }

    /// Waits `duration`, or less when interrupted.
    func sleep(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        _ = wakeUp.wait(timeout: .now() + .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)))
    }
}

/// SIGINT and SIGTERM, watched on one loop: the first begins a graceful shutdown,
/// held until the gateway serves (and reported to `whileStarting` meanwhile); the
/// second ends the process at once.
private final class ShutdownSignals {
    private var watchers: [SignalWatcher] = []
    private var signalsReceived = 0
    private var isServing = false
    private var pending: Int32?
    private let whileStarting: (Int32) -> Void
    private let beginShutdown: (Int32) -> Void
    private let exitAtOnce: (Int32) -> Void

    private init(
        whileStarting: @escaping (Int32) -> Void, beginShutdown: @escaping (Int32) -> Void,
        exitAtOnce: @escaping (Int32) -> Void
    ) {
        self.whileStarting = whileStarting
        self.beginShutdown = beginShutdown
        self.exitAtOnce = exitAtOnce
    }

    /// Watches both signals on `loop` and returns once they are watched. Call off the loop.
    static func install(
        on loop: EventLoop, whileStarting: @escaping @Sendable (Int32) -> Void,
        beginShutdown: @escaping @Sendable (Int32) -> Void, exitAtOnce: @escaping @Sendable (Int32) -> Void
    ) -> LoopBound<ShutdownSignals> {
        loop.runAndWait {
            let signals = ShutdownSignals(
                whileStarting: whileStarting, beginShutdown: beginShutdown, exitAtOnce: exitAtOnce)
            signals.watchers = [SIGINT, SIGTERM].map { number in
                SignalWatcher(loop: loop, signal: number) { [unowned signals] in signals.received($0) }
            }
            return LoopBound(signals, loop: loop)
        }
    }

    /// The gateway serves: a signal received meanwhile begins the shutdown now.
    func serving() {
        isServing = true
        if let pending { beginShutdown(pending) }
    }

    private func received(_ signal: Int32) {
        signalsReceived += 1
        if signalsReceived > 1 { return exitAtOnce(signal) }
        if isServing {
            beginShutdown(signal)
        } else {
            pending = signal
            whileStarting(signal)
        }
    }
}

/// The LISTEN connection's state and counters: written on the listener's loop, read
/// by `/readyz` and `/metrics` on any loop.
final class ListenerStatus: Sendable {
    private let connected = Atomic<Bool>(false)
    private let reconnectCount = Atomic<Int>(0)
    private let cueCount = Atomic<Int>(0)

    var isConnected: Bool {
        get { connected.load(ordering: .relaxed) }
        set { connected.store(newValue, ordering: .relaxed) }
    }

    func reconnected() { reconnectCount.add(1, ordering: .relaxed) }

    func cuesReceived(_ count: Int) { cueCount.add(count, ordering: .relaxed) }

    var figures: ListenerFigures {
        ListenerFigures(
            isConnected: isConnected, reconnects: reconnectCount.load(ordering: .relaxed),
            cuesReceived: cueCount.load(ordering: .relaxed))
    }
}
