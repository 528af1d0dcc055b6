import FerryLoop

/// A pool of PostgreSQL connections on one event loop (one pool per loop). Loop thread only.
///
/// Connections open lazily, up to ``maxConnections``. A caller that finds none idle
/// waits in a FIFO queue bounded by ``maxWaiters`` for at most
/// ``waitTimeoutMilliseconds``; past either bound it gets a retryable
/// ``PostgresError/Kind/poolExhausted``. A connection that breaks is discarded on
/// release (its caller already got the retryable error) and a new one is opened for
/// whoever waits, so the next query succeeds.
public final class PostgresPool {
    /// Counts for metrics.
    public struct Statistics: Sendable, Equatable {
        /// Connections open or being opened.
        public var open: Int
        /// Connections leased to callers.
        public var inUse: Int
        /// Connections open and free.
        public var idle: Int
        /// Callers waiting for a connection.
        public var waiting: Int

        /// Creates statistics (for comparisons in tests and metrics code).
        public init(open: Int, inUse: Int, idle: Int, waiting: Int) {
            self.open = open
            self.inUse = inUse
            self.idle = idle
            self.waiting = waiting
        }
    }

    private struct Waiter {
        var id: UInt64
        var completion: (Result<PostgresConnection, PostgresError>) -> Void
        var timer: Timer
    }

    /// The loop the pool and its connections belong to.
    public let loop: EventLoop
    /// How every connection is opened.
    public let configuration: PostgresConfiguration
    /// The most connections open at once (counting those being opened).
    public let maxConnections: Int
    /// The most callers waiting at once.
    public let maxWaiters: Int
    /// How long a caller waits for a connection, in milliseconds.
    public let waitTimeoutMilliseconds: UInt64

    private var idle: [PostgresConnection] = []
    private var inUse: Set<ObjectIdentifier> = []
    private var connecting = 0
    private var waiters: [Waiter] = []
    private var nextWaiterID: UInt64 = 0
    private var closed = false

    /// Creates an empty pool; nothing connects until the first lease.
    public init(
        loop: EventLoop, configuration: PostgresConfiguration, maxConnections: Int = 10, maxWaiters: Int = 1_000,
        waitTimeoutMilliseconds: UInt64 = 5_000
    ) {
        precondition(maxConnections > 0, "a pool needs at least one connection")
        self.loop = loop
        self.configuration = configuration
        self.maxConnections = maxConnections
        self.maxWaiters = maxWaiters
        self.waitTimeoutMilliseconds = waitTimeoutMilliseconds
    }

    /// Current counts.
    public var statistics: Statistics {
        Statistics(
            open: idle.count + inUse.count + connecting, inUse: inUse.count, idle: idle.count, waiting: waiters.count)
    }

    // MARK: - Leasing

    /// Calls `completion` on the loop with a connection for the caller's exclusive use,
    /// which must go back with ``release(_:)``; or with the reason there is none.
    public func lease(_ completion: @escaping (Result<PostgresConnection, PostgresError>) -> Void) {
        loop.preconditionInEventLoop()
        guard !closed else { return completion(.failure(PostgresError(.poolClosed, "pool closed"))) }
        while let connection = idle.popLast() {
            guard connection.isUsable else { continue }
            inUse.insert(ObjectIdentifier(connection))
            return completion(.success(connection))
        }
        guard waiters.count < maxWaiters else {
            return completion(
                .failure(PostgresError(.poolExhausted, "pool exhausted: \(maxWaiters) callers already waiting")))
        }
        nextWaiterID += 1
        let id = nextWaiterID
        let timer = Timer(loop: loop)
        timer.start(after: waitTimeoutMilliseconds) { [weak self] in self?.timeOut(id) }
        waiters.append(Waiter(id: id, completion: completion, timer: timer))
        openIfNeeded()
    }

    /// Gives back a leased connection. A broken one is closed and, if callers wait,
    /// replaced; so is one that carried a large message
    /// (``PostgresConnection/holdsLargeBuffers``), whose libpq buffers would otherwise
    /// keep that much memory for as long as the pool keeps it.
    public func release(_ connection: PostgresConnection) {
        loop.preconditionInEventLoop()
        guard inUse.remove(ObjectIdentifier(connection)) != nil else {
            preconditionFailure("released a connection this pool did not lease")
        }
        guard !closed, connection.isUsable, !connection.holdsLargeBuffers else {
            connection.onClose = nil
            connection.close()
            openIfNeeded()
            return
        }
        hand(connection)
    }

    /// Runs one statement on a leased connection and releases it before calling `completion`.
    public func query(
        _ statement: PostgresStatement, _ completion: @escaping (Result<PostgresResult, PostgresError>) -> Void
    ) {
        withConnection({ connection, done in connection.query(statement, done) }, completion)
    }

    /// Runs one statement with text parameters; see ``query(_:_:)-(PostgresStatement,_)``.
    public func query(
        _ sql: String, _ parameters: [String?] = [],
        _ completion: @escaping (Result<PostgresResult, PostgresError>) -> Void
    ) {
        query(PostgresStatement(sql, parameters), completion)
    }

    /// Runs `statements` before one Sync on a leased connection (one round trip, one
    /// implicit transaction); see ``PostgresConnection/pipeline(_:_:)``.
    public func pipeline(
        _ statements: [PostgresStatement], _ completion: @escaping (Result<[PostgresResult], PostgresError>) -> Void
    ) {
        withConnection({ connection, done in connection.pipeline(statements, done) }, completion)
    }

    /// Closes idle connections now and leased ones on release; waiters and later leases fail with ``PostgresError/Kind/poolClosed``.
    public func close() {
        loop.preconditionInEventLoop()
        guard !closed else { return }
        closed = true
        let (waiting, free) = (waiters, idle)
        waiters = []
        idle = []
        for connection in free {
            connection.onClose = nil
            connection.close()
        }
        for waiter in waiting {
            waiter.timer.close()
            waiter.completion(.failure(PostgresError(.poolClosed, "pool closed")))
        }
    }

    // MARK: - Internals

    private func withConnection<T>(
        _ body: @escaping (PostgresConnection, @escaping (Result<T, PostgresError>) -> Void) -> Void,
        _ completion: @escaping (Result<T, PostgresError>) -> Void
    ) {
        lease { [self] result in
            switch result {
            case .failure(let error):
                completion(.failure(error))
            case .success(let connection):
                body(connection) { result in
                    self.release(connection)
                    completion(result)
                }
            }
        }
    }

    /// Opens connections while more callers wait than connections are being opened, within the maximum.
    private func openIfNeeded() {
        while !closed, waiters.count > connecting, statistics.open < maxConnections {
            connecting += 1
            PostgresConnection.connect(on: loop, configuration: configuration) { [self] result in
                connecting -= 1
                switch result {
                case .success(let connection):
                    guard !closed else { return connection.close() }
                    connection.onClose = { [weak self, unowned connection] _ in self?.discard(connection) }
                    hand(connection)
                case .failure(let error):
                    // The oldest waiter gets the reason; the others keep waiting for a release or another attempt.
                    if !waiters.isEmpty {
                        let waiter = waiters.removeFirst()
                        waiter.timer.close()
                        waiter.completion(.failure(error))
                    }
                    openIfNeeded()
                }
            }
        }
    }

    private func hand(_ connection: PostgresConnection) {
        guard !waiters.isEmpty else { return idle.append(connection) }
        let waiter = waiters.removeFirst()
        waiter.timer.close()
        inUse.insert(ObjectIdentifier(connection))
        waiter.completion(.success(connection))
    }

    /// An idle connection broke (the server ended it): forget it. A leased one is dropped on release.
    private func discard(_ connection: PostgresConnection) {
        idle.removeAll { $0 === connection }
    }

    private func timeOut(_ id: UInt64) {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return }
        let waiter = waiters.remove(at: index)
        waiter.timer.close()
        waiter.completion(
            .failure(
                PostgresError(
                    .poolExhausted, "pool exhausted: no connection free within \(waitTimeoutMilliseconds) ms")))
    }
}
