import Dispatch
import FerryLoop
import Glibc
import Synchronization

/// An HTTP/1.1 server on every loop of a ``LoopGroup``.
///
/// Each loop opens its own listener on the same address (`SO_REUSEPORT`), so the
/// kernel spreads connections across loops and a connection lives and dies on the
/// loop that accepted it. Each loop also builds its own ``Router`` and observer from
/// the factories given here (on that loop's thread), so handlers can capture per-loop
/// state (a database pool, counters) without locks.
///
/// ```swift
/// let server = HTTPServer(configuration: .init(port: 8080), group: group) { loop in
///     var router = Router()
///     router.get("/healthz") { _, responder in responder.respond(.text("ok")) }
///     return router
/// }
/// let address = try server.start()
/// …
/// await server.shutdown(deadline: .now + .seconds(10))
/// ```
public final class HTTPServer: Sendable {
    /// The configuration the server was created with.
    public let configuration: HTTPServerConfiguration
    /// The loops serving the connections; the server does not stop them.
    public let group: LoopGroup
    private let makeRouter: @Sendable (EventLoop) -> Router
    private let makeObserver: @Sendable (EventLoop) -> (any HTTPObserver)?
    private let loops: [LoopBound<HTTPServerLoop>]
    private let phase = Mutex(Phase.created)

    private enum Phase { case created, started, shutDown }

    /// Creates a server; nothing is bound until ``start()``.
    ///
    /// - Parameters:
    ///   - router: called once per loop, on that loop, to build the loop's routes.
    ///   - observer: called once per loop, on that loop; its result sees that loop's
    ///     connections and responses.
    public init(
        configuration: HTTPServerConfiguration, group: LoopGroup,
        observer: @escaping @Sendable (EventLoop) -> (any HTTPObserver)? = { _ in nil },
        router: @escaping @Sendable (EventLoop) -> Router
    ) {
        self.configuration = configuration
        self.group = group
        self.makeRouter = router
        self.makeObserver = observer
        let budget = BodyBudget(limit: configuration.limits.maxBufferedBodyBytes)
        loops = group.loops.map {
            LoopBound(sending: HTTPServerLoop(loop: $0, configuration: configuration, budget: budget), loop: $0)
        }
    }

    // MARK: - Starting

    /// Binds every loop's listener and starts accepting; returns the bound address
    /// (with the real port when port 0 was asked for).
    ///
    /// Unless ``HTTPServerConfiguration/sharesPort``, an address another socket serves
    /// is refused with `EADDRINUSE`: before binding (``TCPListener/checkNotServed(_:)``),
    /// and after, for a process that bound it in between.
    ///
    /// Blocks until every loop is listening: call it from outside the group's loops.
    /// On failure nothing stays bound.
    @discardableResult
    public func start() throws(LoopError) -> SocketAddress {
        precondition(!group.loops.contains { $0.inEventLoop }, "start() waits for the loops: call it off them")
        phase.withLock { phase in
            precondition(phase == .created, "an HTTPServer starts once")
            phase = .started
        }
        var address = try SocketAddress(host: configuration.host, port: configuration.port)
        if !configuration.sharesPort { try TCPListener.checkNotServed(address) }
        var inodes: Set<UInt64> = []
        for (index, bound) in loops.enumerated() {
            // One loop after the other: the first binds port 0 and the rest reuse the port it got.
            let requested = address
            let makeRouter = makeRouter
            let makeObserver = makeObserver
            let result = bound.loop.runAndWait { () -> Result<(SocketAddress, inode: UInt64), LoopError> in
                let loop = bound.loop
                do throws(LoopError) {
                    let server = bound.value
                    let listener = try server.listen(
                        on: requested, router: makeRouter(loop), observer: makeObserver(loop))
                    return .success((listener.address, listener.inode))
                } catch {
                    return .failure(error)
                }
            }
            switch result {
            case .success(let listening):
                address = listening.0
                inodes.insert(listening.inode)
            case .failure(let error):
                closeListeners(loops[..<index])
                throw error
            }
        }
        if !configuration.sharesPort && TCPListener.otherListeners(on: address, excluding: inodes) > 0 {
            closeListeners(loops[...])
            throw LoopError(errno: EADDRINUSE, operation: "bind \(address)")
        }
        return address
    }

    private func closeListeners(_ opened: ArraySlice<LoopBound<HTTPServerLoop>>) {
        for bound in opened {
            bound.loop.runAndWait { bound.value.closeListener() }
        }
    }

    // MARK: - Shutting down

    /// Stops accepting, closes idle connections at once, lets requests in flight finish
    /// (their connections close after the answer), and at `deadline` closes whatever is left.
    ///
    /// `completion` runs once every connection is gone, on the thread of the loop whose
    /// last connection closed last (any thread, as far as the caller knows). Safe from
    /// any thread; the loops keep running. A second call keeps the first deadline and
    /// completes when the first does. Connections taken over by another protocol
    /// (``HTTPResponder/takeOver(_:)``) are not the HTTP server's to close.
    public func shutdown(deadline: ContinuousClock.Instant, completion: @escaping @Sendable () -> Void) {
        phase.withLock { $0 = .shutDown }
        let grace = max(.zero, deadline - .now)
        let milliseconds = UInt64(grace.nanoseconds / 1_000_000)
        let countdown = Countdown(count: loops.count, completion: completion)
        for bound in loops {
            bound.loop.execute {
                bound.value.shutdown(forceAfter: milliseconds) { countdown.arrive() }
            }
        }
    }

    /// Shuts down as ``shutdown(deadline:completion:)`` does and returns when every connection is gone.
    public func shutdown(deadline: ContinuousClock.Instant) async {
        await withCheckedContinuation { continuation in
            shutdown(deadline: deadline) { continuation.resume() }
        }
    }
}

/// Calls `completion` when `count` parties have arrived. Any thread.
private final class Countdown: Sendable {
    private let remaining: Atomic<Int>
    private let completion: @Sendable () -> Void

    init(count: Int, completion: @escaping @Sendable () -> Void) {
        remaining = Atomic(count)
        self.completion = completion
    }

    func arrive() {
        if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { completion() }
    }
}

/// What one loop of an ``HTTPServer`` owns: its listener, router, observer, date
/// cache and open connections. Loop thread only.
final class HTTPServerLoop {
    let loop: EventLoop
    let limits: HTTPLimits
    let timeouts: HTTPConnectionStateMachine.Timeouts
    let date = HTTPDate()
    /// The server's one bound on body bytes held, shared by every loop.
    let budget: BodyBudget
    /// The proxies whose connections start with a PROXY header.
    let trustedProxies: TrustedProxies
    /// The origins allowed to call from a browser.
    let cors: CORSPolicy
    private let backlog: Int32
    private(set) var router = Router()
    /// The head checks of ``router``'s routes, for every connection's ``HeadAdmission``.
    private(set) var headChecks: ((HTTPMethod, String) -> HeadCheck?)?
    private(set) var observer: (any HTTPObserver)?
    private var listener: TCPListener?
    private var connections: [ObjectIdentifier: HTTPConnection] = [:]
    private var isShuttingDown = false
    private var onDrained: (() -> Void)?
    private var forceTimer: Timer?

    init(loop: EventLoop, configuration: HTTPServerConfiguration, budget: BodyBudget) {
        self.loop = loop
        limits = configuration.limits
        timeouts = .init(
            head: configuration.headTimeout.nanoseconds, idle: configuration.idleTimeout.nanoseconds,
            body: configuration.bodyTimeout.nanoseconds)
        self.budget = budget
        trustedProxies = configuration.trustedProxies
        cors = configuration.cors
        backlog = configuration.backlog
    }

    func listen(on address: SocketAddress, router: Router, observer: (any HTTPObserver)?) throws(LoopError)
        -> TCPListener
    {
        self.router = router
        self.observer = observer
        let cors = cors
        headChecks = { [unowned self] method, path in
            guard let check = self.router.headCheck(method: method, path: path) else { return nil }
            guard !cors.isEmpty else { return check }
            // A refusal before the body is an answer the page must be able to read too.
            return { request in
                guard var refusal = check(request) else { return nil }
                if let origin = cors.allowedOrigin(of: request) { CORSPolicy.decorate(&refusal, origin: origin) }
                return refusal
            }
        }
        let listener = try TCPListener(loop: loop, address: address, reusePort: true, backlog: backlog) {
            [unowned self] tcp in accept(tcp)
        }
        self.listener = listener
        return listener
    }

    func closeListener() {
        listener?.close()
        listener = nil
    }

    // MARK: - Connections

    private func accept(_ tcp: TCPConnection) {
        guard !isShuttingDown else {
            tcp.close()
            return
        }
        let connection = HTTPConnection(tcp: tcp, home: self)
        connections[ObjectIdentifier(connection)] = connection
        connection.start()
    }

    /// The connection closed, or was taken over by another protocol.
    func connectionClosed(_ connection: HTTPConnection) {
        guard connections.removeValue(forKey: ObjectIdentifier(connection)) != nil else { return }
        observer?.connectionClosed(remoteAddress: connection.remoteAddress)
        if isShuttingDown && connections.isEmpty { finishShutdown() }
    }

    // MARK: - Shutdown

    func shutdown(forceAfter milliseconds: UInt64, completion: @escaping () -> Void) {
        guard !isShuttingDown else {
            // A second request (say SIGINT after SIGTERM) keeps the first deadline and
            // learns of the same end.
            if let earlier = onDrained {
                onDrained = {
                    earlier()
                    completion()
                }
            } else {
                completion()
            }
            return
        }
        isShuttingDown = true
        onDrained = completion
        closeListener()
        guard !connections.isEmpty else { return finishShutdown() }
        for connection in Array(connections.values) { connection.shutdown() }
        // Closing is asynchronous (libuv close callbacks), so even idle connections are
        // counted down from their close callbacks; the timer catches the stragglers.
        forceTimer = loop.schedule(after: milliseconds) { [unowned self] in
            forceTimer = nil
            for connection in Array(connections.values) { connection.forceClose() }
        }
    }

    private func finishShutdown() {
        forceTimer?.close()
        forceTimer = nil
        let completion = onDrained
        onDrained = nil
        completion?()
    }
}
