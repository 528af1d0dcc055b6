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
    let contexts: [LoopBound<LoopContext>]
    private let server: HTTPServer
    private let listener: LoopBound<Listener>
    private let listenerStatus = ListenerStatus()
    /// Whether the listener receives: a NOTIFY round trip on a channel of its own.
    private let probe: LoopBound<ListenerProbe>
    /// The private channel of the loops' ``SharedPulls`` barriers; nil with the cache off.
    private let sharedPullChannel: String?
    /// The in-process tombstone purge on loop 0, when configured.
    private let purger: LoopBound<TombstonePurger>?
    /// The mail sender on loop 0, when an SMTP relay is configured.
    private let mailer: LoopBound<MailSender>?
    /// The settling of this shard's stale email directory claims on loop 0, when a
    /// directory is configured.
    let reconciler: LoopBound<ClaimReconciler>?
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
        // Its statement timeout and UTC are set per transaction (TransactionSettings).
        var requestDatabase = try PostgresConfiguration(
            configuration.databaseURL, applicationName: "ferry",
            statementTimeoutMilliseconds: configuration.statementTimeoutMilliseconds)
        requestDatabase.preparesStatements = configuration.preparesStatements
        let database = requestDatabase
        let readDatabases = try configuration.readDatabaseURLs.map { url in
            var replica = try PostgresConfiguration(
                url, applicationName: "ferry-read",
                statementTimeoutMilliseconds: configuration.statementTimeoutMilliseconds)
            replica.preparesStatements = requestDatabase.preparesStatements
            return replica
        }
        let directoryDatabase = try configuration.directoryDatabaseURL.map { url in
            try PostgresConfiguration(
                url, applicationName: "ferry-directory",
                statementTimeoutMilliseconds: configuration.statementTimeoutMilliseconds)
        }
        let listenDatabase = try PostgresConfiguration(
            configuration.listenDatabaseURL, applicationName: "ferry-listener")
        let group = LoopGroup(count: configuration.threads)
        self.group = group
        let accounts = Accounts(configuration: configuration, logger: logger)
        self.accounts = accounts
        let streamPolicy = StreamPolicy(
            heartbeatMilliseconds: configuration.streamHeartbeatMilliseconds,
            tokenWarningSeconds: configuration.streamTokenWarningSeconds,
            maxUnsentBytes: configuration.streamMaxUnsentBytes)
        let quota = ConcurrencyLimit<UUID>(limit: configuration.streamsPerUser)
        let requests = RequestsInFlight(
            perDevice: configuration.requestsPerDevice, perUser: configuration.requestsPerUser,
            pushBytesPerSecond: configuration.pushBytesPerSecond)
        self.requests = requests
        let made = Mutex<[Int: LoopBound<LoopContext>]>([:])
        let probeChannel = ListenerProbe.newChannel()
        let sharedPullChannel = configuration.sharedPullCache ? SharedPulls.newChannel() : nil
        self.sharedPullChannel = sharedPullChannel
        let madeProbe = Mutex<LoopBound<ListenerProbe>?>(nil)
        group.onEveryLoop { loop in
            let pool = PostgresPool(loop: loop, configuration: database, maxConnections: configuration.poolSize)
            let replicas = ReadReplicas(
                loop: loop, databases: readDatabases, primary: pool, poolSize: configuration.poolSize,
                waitMilliseconds: UInt64(configuration.replicaWaitMilliseconds))
            let directory = directoryDatabase.map { database in
                EmailDirectory(
                    pool: PostgresPool(
                        loop: loop, configuration: database, maxConnections: max(configuration.poolSize / 4, 2)),
                    logger: logger)
            }
            let index = group.loops.firstIndex { $0 === loop }!
            let sharedPulls = sharedPullChannel.map { channel in
                SharedPulls(
                    loop: loop, loopIndex: index, pool: pool, channel: channel,
                    waitMilliseconds: UInt64(configuration.sharedPullWaitMilliseconds), logger: logger)
            }
            let context = LoopContext(
                loop: loop, pool: pool, logger: logger, streams: streamPolicy, accounts: accounts, quota: quota,
                requests: requests, replicas: replicas, directory: directory, sharedPulls: sharedPulls)
            made.withLock { $0[index] = LoopBound(context, loop: loop) }
            // The listener's loop, whose pool sends the probe.
            if index == 0 {
                let probe = ListenerProbe(loop: loop, pool: pool, channel: probeChannel)
                madeProbe.withLock { $0 = LoopBound(probe, loop: loop) }
            }
        }
        let contexts = made.withLock { made in group.loops.indices.map { made[$0]! } }
        self.contexts = contexts
        let probe = madeProbe.withLock { $0! }
        self.probe = probe
        let listenerLoop = group.loops[0]
        purger = configuration.purgeTombstonesEverySeconds.map { every in
            LoopBound(
                sending: TombstonePurger(
                    context: contexts[0], logger: logger, everySeconds: every,
                    retentionSeconds: configuration.tombstoneRetentionSeconds),
                loop: contexts[0].loop)
        }
        reconciler = configuration.directoryDatabaseURL.map { _ in
            LoopBound(
                sending: ClaimReconciler(
                    context: contexts[0], olderThanSeconds: configuration.directoryClaimSeconds,
                    confirmed: configuration.requiresEmailConfirmation),
                loop: contexts[0].loop)
        }
        mailer = configuration.smtpURL.map { url in
            LoopBound(
                sending: MailSender(
                    context: contexts[0], relay: SMTPRelay(url: url, from: configuration.mailFrom),
                    templates: configuration.mailTemplates, logger: logger),
                loop: contexts[0].loop)
        }
        listener = LoopBound(
            sending: Listener(
                loop: listenerLoop, configuration: listenDatabase,
                channels: [Self.cueChannel, Self.revocationChannel, probeChannel]
                    + (sharedPullChannel.map { [$0] } ?? [])),
            loop: listenerLoop)
        let watermelonRoutes = WatermelonRoutes(
            accounts: accounts, maxPushRecords: configuration.watermelonMaxPushRecords,
            maxBodyBytes: configuration.watermelonMaxBodyBytes, pullSeconds: configuration.watermelonPullSeconds)
        var limits = HTTPLimits()
        limits.maxBodyBytes = configuration.maxBodyBytes
        limits.maxUnsentBytes = configuration.maxUnsentBytes
        limits.pathBodyLimits = [watermelonRoutes.bodyLimit]
        limits.maxBufferedBodyBytes = configuration.bodyBufferBytes
        var http = HTTPServerConfiguration(
            host: configuration.host, port: configuration.port, limits: limits,
            headTimeout: .seconds(configuration.headerTimeoutSeconds),
            idleTimeout: .seconds(configuration.idleTimeoutSeconds),
            bodyTimeout: .seconds(configuration.bodyTimeoutSeconds))
        http.sharesPort = configuration.sharesPort
        http.trustedProxies = configuration.trustedProxies
        http.cors = configuration.cors
        let routes = OperationsRoutes(
            contexts: contexts, listenerStatus: listenerStatus, probe: probe, logger: logger)
        let accountRoutes = AccountRoutes(accounts: accounts)
        let passwordRoutes = PasswordRoutes(accounts: accounts)
        let syncRoutes = SyncRoutes(
            accounts: accounts, maxPushMutations: configuration.maxPushMutations,
            cursors: PullCursorSealer(configuration: configuration))
        let streamRoutes = StreamRoutes(
            accounts: accounts, maxMessageBytes: configuration.streamMaxMessageBytes,
            closeTimeoutMilliseconds: UInt64(configuration.streamCloseTimeoutMilliseconds), quota: quota)
        server = HTTPServer(
            configuration: http, group: group,
            observer: { loop in contexts.first { $0.loop === loop }!.value },
            router: { loop in
                var router = Router()
                let context = contexts.first { $0.loop === loop }!.value
                routes.register(in: &router, context: context)
                accountRoutes.register(in: &router, context: context)
                passwordRoutes.register(in: &router, context: context)
                syncRoutes.register(in: &router, context: context)
                watermelonRoutes.register(in: &router, context: context)
                LockRoutes(accounts: accounts).register(in: &router, context: context)
                streamRoutes.register(in: &router, context: context)
                return router
            })
    }

    /// Starts serving, then connects the listener; returns the bound address. An
    /// address that cannot be served throws before the listener connects.
    @discardableResult
    public func start() throws -> SocketAddress {
        // A peer that closes while we write must be an EPIPE error, not a signal that kills us.
        signal(SIGPIPE, SIG_IGN)
        MemoryReturn.configure()
        let address = try server.start()
        let listener = self.listener
        let logger = self.logger
        let status = listenerStatus
        let accounts = self.accounts
        let contexts = self.contexts
        let context = contexts[0]
        let probe = self.probe
        let sharedPullChannel = self.sharedPullChannel
        listener.loop.execute {
            let connection = listener.value
            let cues = CueBatcher(loop: listener.loop, contexts: contexts, status: status, logger: logger)
            connection.onStateChange = { state in
                let connected = state == .connected
                status.isConnected = connected
                probe.value.forget()
                logger.log(connected ? .info : .warning, connected ? "listener connected" : "listener disconnected")
                for context in contexts {
                    context.loop.execute { context.value.sharedPulls?.listenerChanged(connected: connected) }
                }
                // Revocations announced while nobody listened would be lost: reload them.
                // A new connection may be to a promoted replica: note its timeline before
                // the first pull there would have to expire cursors from the one before.
                if connected {
                    accounts.reloadRevocations(on: context.value.pool)
                    SchemaCheck.run(on: context.value.pool) { check in
                        if check != .ready { logger.log(.warning, "not ready", ["reason": check.advice]) }
                    }
                }
            }
            connection.onGap = {
                status.reconnected()
                // Cues sent while nobody listened are lost: every stream pulls.
                for context in contexts { context.loop.execute { context.value.hub.cueEveryStream() } }
            }
            connection.onNotification = { notification in
                if notification.channel == Self.cueChannel {
                    cues.add(notification.payload)
                } else if notification.channel == sharedPullChannel {
                    cues.addBarrier(notification.payload)
                } else if notification.channel == probe.value.channel {
                    probe.value.received(notification.payload)
                } else if notification.channel == Self.revocationChannel,
                    let revocation = accounts.noteRevocation(payload: notification.payload)
                {
                    for context in contexts { context.loop.execute { context.value.hub.revoke(revocation) } }
                }
            }
            connection.start()
        }
        let sweeping = contexts[0]
        sweeping.loop.execute { sweeping.value.queuedCues.startSweeping() }
        if let purger {
            purger.loop.execute { purger.value.start() }
        }
        if let mailer {
            mailer.loop.execute { mailer.value.start() }
        }
        if let reconciler {
            reconciler.loop.execute { reconciler.value.start() }
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

    /// Waits until the listener listens, then for one ``ListenerProbe`` round trip; nil
    /// when the listener did not connect within `seconds`, or within 2 s of a signal
    /// (`interruption`: a signal while starting stops the gateway once it serves, so a
    /// listener about to connect is waited for). Call off the loops, after ``start()``.
    func checkListener(seconds: Int, interruption: StartupInterruption) -> ListenerProbe.Outcome? {
        var deadline = ContinuousClock.now + .seconds(seconds)
        var interrupted = false
        while !listenerStatus.isConnected {
            if !interrupted && interruption.isInterrupted {
                interrupted = true
                deadline = min(deadline, ContinuousClock.now + .seconds(2))
            }
            if ContinuousClock.now >= deadline { return nil }
            interruption.sleep(.milliseconds(50))
        }
        let probe = self.probe
        return probe.loop.waitForCallback { done in probe.value.check(done) }
    }

    /// One schema check on the first loop's pool, waited for.
    private func checkSchema() -> SchemaCheck {
        let context = contexts[0]
        return context.loop.waitForCallback { done in SchemaCheck.run(on: context.value.pool, done) }!
    }

    /// Stops accepting, lets requests in flight finish until the shutdown timeout,
    /// then closes pools and the listener and stops the loops.
    public func shutdown() async {
        let deadline = ContinuousClock.now + .seconds(configuration.shutdownTimeoutSeconds)
        // Streams are not the HTTP server's (taken over): each loop's hub sends what is
        // pending and closes them 1001 while requests in flight finish.
        async let streamsClosed: Void = withTaskGroup(of: Void.self) { group in
            for context in contexts {
                group.addTask {
                    await withCheckedContinuation { continuation in
                        context.loop.execute { context.value.hub.shutdown { continuation.resume() } }
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
        if let reconciler {
            await withCheckedContinuation { continuation in
                reconciler.loop.execute {
                    reconciler.value.close()
                    continuation.resume()
                }
            }
        }
        if let mailer {
            await withCheckedContinuation { continuation in
                mailer.loop.execute {
                    mailer.value.close()
                    continuation.resume()
                }
            }
        }
        for context in contexts {
            await withCheckedContinuation { continuation in
                context.loop.execute {
                    context.value.close()
                    continuation.resume()
                }
            }
        }
        accounts.passwords.close()
        group.stopAndWait()
    }

    /// Settles this shard's email directory claims pending for more than
    /// `olderThanSeconds` now, as the reconciliation timer does: how many were settled,
    /// or nil when the directory or the database failed (or none is configured).
    public func reconcileEmailClaims(olderThanSeconds: Int) async -> Int? {
        guard let reconciler else { return nil }
        return await withCheckedContinuation { continuation in
            reconciler.loop.execute {
                reconciler.value.round(olderThanSeconds: olderThanSeconds) { continuation.resume(returning: $0) }
            }
        }
    }
}
