import FerryLoop
import Synchronization

/// One PostgreSQL connection for async/await code outside the request path: the CLI
/// (migrations, cleanup) and tests. Sendable; calls from any task.
///
/// The connection belongs to an event loop (its own thread, started by ``connect(_:on:)``
/// unless one is given); every call hops to that loop with ``EventLoop/execute(_:)`` and
/// resumes the caller from there. Calls are answered in order. The request path uses
/// ``PostgresPool`` with callbacks instead, which costs no task switches.
public final class PostgresClient: Sendable {
    /// The loop the connection lives on.
    public let loop: EventLoop
    private let ownsLoop: Bool
    private let connection: LoopBound<PostgresConnection>
    private let closed = Atomic<Bool>(false)

    private init(loop: EventLoop, ownsLoop: Bool, connection: LoopBound<PostgresConnection>) {
        self.loop = loop
        self.ownsLoop = ownsLoop
        self.connection = connection
    }

    /// Connects with `configuration` on `loop`, or on a new loop thread owned by the client when nil.
    public static func connect(_ configuration: PostgresConfiguration, on loop: EventLoop? = nil)
        async throws(PostgresError)
        -> PostgresClient
    {
        let target = loop ?? EventLoop.spawn(name: "postgres-client")
        let result: Result<LoopBound<PostgresConnection>, PostgresError> = await withCheckedContinuation {
            continuation in
            target.execute {
                PostgresConnection.connect(on: target, configuration: configuration) { result in
                    continuation.resume(returning: result.map { LoopBound($0, loop: target) })
                }
            }
        }
        switch result {
        case .success(let connection):
            return PostgresClient(loop: target, ownsLoop: loop == nil, connection: connection)
        case .failure(let error):
            if loop == nil { target.stop() }
            throw error
        }
    }

    deinit {
        if !closed.exchange(true, ordering: .relaxed) {
            let (connection, loop, ownsLoop) = (self.connection, self.loop, self.ownsLoop)
            loop.execute {
                connection.value.close()
                if ownsLoop { loop.stop() }
            }
        }
    }

    /// Runs one statement with text parameters (`$1`, …) and returns its result.
    @discardableResult
    public func query(_ sql: String, _ parameters: [String?] = []) async throws(PostgresError) -> PostgresResult {
        try await run { connection, done in
            connection.query(sql, parameters) { done($0.map { [$0] }) }
        }[0]
    }

    /// Runs one statement, prepared once on the connection when it has a ``PostgresStatement/preparedName``.
    @discardableResult
    public func query(_ statement: PostgresStatement) async throws(PostgresError) -> PostgresResult {
        try await run { connection, done in
            connection.query(statement) { done($0.map { [$0] }) }
        }[0]
    }

    /// Runs `statements` before one Sync (one round trip, one implicit transaction); one result per statement.
    public func pipeline(_ statements: [PostgresStatement]) async throws(PostgresError) -> [PostgresResult] {
        try await run { connection, done in connection.pipeline(statements, done) }
    }

    /// Runs `sql` with the simple-query protocol: any number of statements separated by
    /// `;`, no parameters (a migration file). Returns one result per statement.
    @discardableResult
    public func execute(_ sql: String) async throws(PostgresError) -> [PostgresResult] {
        try await run { connection, done in connection.execute(sql, done) }
    }

    /// The backend process id of the connection.
    public func backendPID() async -> Int32 {
        await withCheckedContinuation { continuation in
            let connection = self.connection
            loop.execute { continuation.resume(returning: connection.value.backendPID) }
        }
    }

    /// Closes the connection (and stops the loop when the client started it). Later calls fail.
    public func close() async {
        guard !closed.exchange(true, ordering: .relaxed) else { return }
        let (connection, loop, ownsLoop) = (self.connection, self.loop, self.ownsLoop)
        await withCheckedContinuation { continuation in
            loop.execute {
                connection.value.close()
                continuation.resume()
                if ownsLoop { loop.stop() }
            }
        }
    }

    private func run(
        _ body: @escaping (PostgresConnection, @escaping (Result<[PostgresResult], PostgresError>) -> Void) -> Void
    ) async throws(PostgresError) -> [PostgresResult] {
        guard !closed.load(ordering: .relaxed) else { throw PostgresError(.closed, "client closed") }
        let connection = self.connection
        nonisolated(unsafe) let body = body
        let result: Result<[PostgresResult], PostgresError> = await withCheckedContinuation { continuation in
            connection.loop.execute {
                body(connection.value) { continuation.resume(returning: $0) }
            }
        }
        return try result.get()
    }
}
