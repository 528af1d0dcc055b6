import CLibPQ
import FerryLoop
import Glibc

/// One PostgreSQL connection driven by libpq's non-blocking API on one event loop. Loop thread only.
///
/// The connection performs what its ``ConnectionStateMachine`` decides: it sends an
/// operation (`PQsendQueryParams`, `PQsendPrepare`/`PQsendQueryPrepared` in pipeline
/// mode, or `PQsendQuery`), flushes with write-readiness until `PQflush` returns 0,
/// reads with `PQconsumeInput` when the socket is readable, hands every `PQgetResult`
/// to the machine, and delivers notifications after every read. Operations queue in
/// FIFO order behind the one in flight. Completions are called on the loop.
///
/// A broken connection (socket error, end of stream, a FATAL error such as
/// `pg_terminate_backend`) fails every pending and later operation with a retryable
/// ``PostgresError``. While open, the connection keeps itself alive (its socket watcher
/// holds it); call ``close()`` when done with it.
public final class PostgresConnection {
    /// Called with an operation's results or error, on the connection's loop.
    public typealias Completion = (Result<[PostgresResult], PostgresError>) -> Void

    /// The loop that owns the connection.
    public let loop: EventLoop
    /// The configuration it was opened with.
    public let configuration: PostgresConfiguration
    /// Called for every `NOTIFY` on a channel this connection `LISTEN`s to.
    public var onNotification: ((PostgresNotification) -> Void)?
    /// Called once when the connection breaks or is closed, with the error later operations get.
    public var onClose: ((PostgresError) -> Void)?
    /// The server process id serving this connection (for `pg_terminate_backend`, logs).
    public private(set) var backendPID: Int32 = 0

    private var connection: OpaquePointer?
    private var poll: Poll?
    /// The inode of the socket ``poll`` watches: a socket libpq reopens during connect
    /// may get the same descriptor number back, and only the inode tells them apart.
    private var polledSocketInode: UInt = 0
    /// Socket events handled while connecting, for the timeout's message.
    private var connectEvents = 0
    private var interest: PollEvents = []
    private var machine: ConnectionStateMachine
    private var completions: [ConnectionStateMachine.OperationID: Completion] = [:]
    private var nextID: ConnectionStateMachine.OperationID = 0
    private var deadline: Timer?
    private var connectCompletion: ((Result<PostgresConnection, PostgresError>) -> Void)?
    private var needsFlush = false

    private init(loop: EventLoop, configuration: PostgresConfiguration) {
        self.loop = loop
        self.configuration = configuration
        machine = ConnectionStateMachine(preparesStatements: configuration.preparesStatements)
    }

    /// Whether operations may still succeed (not broken, not closed).
    public var isUsable: Bool { machine.isUsable }

    /// Whether this connection sent parameters or read a result of more than
    /// ``largeBufferBytes``: libpq grows its input and output buffers to the largest
    /// message and never shrinks them, so such a connection keeps that memory for its
    /// life. ``PostgresPool`` closes it on release instead of keeping it.
    public private(set) var holdsLargeBuffers = false

    /// A message past this size leaves its connection ``holdsLargeBuffers``.
    public static let largeBufferBytes = 1 << 20

    /// Operations asked for and not yet completed.
    public var pendingOperations: Int { machine.pendingCount }

    // MARK: - Connecting

    /// Opens a connection on `loop` (the calling thread must be `loop`'s) and calls
    /// `completion` on the loop once it is ready or has failed.
    public static func connect(
        on loop: EventLoop, configuration: PostgresConfiguration,
        _ completion: @escaping (Result<PostgresConnection, PostgresError>) -> Void
    ) {
        loop.preconditionInEventLoop()
        let connection = PostgresConnection(loop: loop, configuration: configuration)
        connection.connectCompletion = completion
        connection.startConnecting()
    }

    private func startConnecting() {
        let parameters = configuration.startupParameters
        connection = withCStringArray(parameters.map(\.0)) { keywords in
            withCStringArray(parameters.map(\.1)) { values in PQconnectStartParams(keywords, values, 1) }
        }
        guard let connection, PQstatus(connection) != CONNECTION_BAD else {
            return failConnecting(PostgresError(.connectionFailed, LibPQ.message(connection)))
        }
        // Notices (and "message arrived while idle" warnings) would otherwise go to stderr.
        PQsetNoticeReceiver(connection, { _, _ in }, nil)
        let timer = Timer(loop: loop)
        deadline = timer
        timer.start(after: UInt64(max(1, configuration.connectTimeoutMilliseconds))) { [unowned self] in
            // Where it stalled tells a slow network from a slow server.
            failConnecting(
                PostgresError(
                    .connectionFailed,
                    "connect timed out after \(configuration.connectTimeoutMilliseconds) ms "
                        + "(\(LibPQ.connectPhase(connection)); \(connectEvents) socket events)"))
        }
        // Before the first PQconnectPoll, libpq says to behave as if it asked to write.
        continueConnecting(PGRES_POLLING_WRITING)
    }

    private func continueConnecting(_ status: PostgresPollingStatusType) {
        guard let connection, case .connecting = machine.state else { return }
        switch status {
        case PGRES_POLLING_OK:
            finishConnecting()
        case PGRES_POLLING_READING, PGRES_POLLING_WRITING:
            let socket = PQsocket(connection)
            guard socket >= 0 else {
                return failConnecting(PostgresError(.connectionFailed, LibPQ.message(connection)))
            }
            // libpq opens a new socket when it moves to the next host or address, or retries
            // without SSL or GSS encryption: watch the new one. The kernel drops a closed
            // descriptor from epoll, so a new socket under a reused number needs a new
            // watcher too, or its events never arrive and the connect times out.
            let inode = Self.inode(of: socket)
            if poll?.fileDescriptor != socket || inode != polledSocketInode {
                poll?.close()
                poll = nil
                interest = []
                do {
                    poll = try Poll(loop: loop, fileDescriptor: socket)
                    polledSocketInode = inode
                } catch {
                    return failConnecting(PostgresError(.connectionFailed, "cannot watch socket: \(error)"))
                }
            }
            let events: PollEvents = status == PGRES_POLLING_READING ? .readable : .writable
            interest = events
            poll!.watch(events) { [self] _ in
                connectEvents += 1
                // Errors included: PQconnectPoll finds out what went wrong on the socket.
                continueConnecting(PQconnectPoll(self.connection))
            }
        default:
            failConnecting(PostgresError(.connectionFailed, LibPQ.message(connection)))
        }
    }

    /// The inode number of an open descriptor (0 if it cannot be read).
    private static func inode(of descriptor: Int32) -> UInt {
        var status = stat()
        return fstat(descriptor, &status) == 0 ? UInt(status.st_ino) : 0
    }

    private func finishConnecting() {
        guard let connection else { return }
        deadline?.stop()
        guard PQsetnonblocking(connection, 1) == 0 else {
            return failConnecting(PostgresError(.connectionFailed, LibPQ.message(connection)))
        }
        backendPID = PQbackendPID(connection)
        // Always watch reads: a server that ends the session is noticed while idle.
        interest = []
        updateInterest()
        let completion = connectCompletion
        connectCompletion = nil
        perform(machine.connected())
        completion?(.success(self))
    }

    private func failConnecting(_ error: PostgresError) {
        let completion = connectCompletion
        connectCompletion = nil
        perform(machine.failed(error))
        completion?(.failure(error))
    }

    // MARK: - Operations

    /// Runs one statement (extended protocol, text parameters) and calls `completion` with its result.
    public func query(
        _ sql: String, _ parameters: [String?] = [],
        _ completion: @escaping (Result<PostgresResult, PostgresError>) -> Void
    ) {
        query(PostgresStatement(sql, parameters), completion)
    }

    /// Runs one statement (prepared by name when it has one) and calls `completion` with its result.
    public func query(
        _ statement: PostgresStatement, _ completion: @escaping (Result<PostgresResult, PostgresError>) -> Void
    ) {
        enqueue(.pipeline([statement])) { result in completion(result.map { $0[0] }) }
    }

    /// Runs `statements` in pipeline mode before one Sync, in one round trip, and calls
    /// `completion` with one result per statement.
    ///
    /// The statements share one implicit transaction (unless they contain their own
    /// `BEGIN`/`COMMIT`): a `select set_config('ferry.user_id', $1, true)` first scopes
    /// the setting to the statements after it. The first error aborts the rest, rolls
    /// the transaction back, and is what `completion` gets.
    public func pipeline(_ statements: [PostgresStatement], _ completion: @escaping Completion) {
        precondition(!statements.isEmpty, "a pipeline needs at least one statement")
        enqueue(.pipeline(statements), completion)
    }

    /// Runs `sql` with the simple-query protocol: several statements separated by `;`,
    /// no parameters (migrations, `LISTEN`). `completion` gets one result per statement.
    public func execute(_ sql: String, _ completion: @escaping Completion) {
        enqueue(.simple(sql), completion)
    }

    private func enqueue(_ request: ConnectionStateMachine.Request, _ completion: @escaping Completion) {
        loop.preconditionInEventLoop()
        nextID += 1
        completions[nextID] = completion
        perform(machine.enqueue(nextID, request))
    }

    /// Closes the connection: pending operations fail with ``PostgresError/Kind/closed``.
    public func close() {
        loop.preconditionInEventLoop()
        perform(machine.failed(PostgresError(.closed, "connection closed")))
    }

    // MARK: - Performing actions

    private func perform(_ action: ConnectionStateMachine.Action) {
        switch action {
        case .none:
            break
        case .send(let plan):
            send(plan)
        case .complete(let completion, let next):
            deadline?.stop()
            if let next { send(next) }
            report(completion)
        case .refuse(let completion):
            report(completion)
        case .close(let completion, let failing, let error):
            tearDown()
            if let completion { report(completion) }
            for id in failing { completions.removeValue(forKey: id)?(.failure(error)) }
            let onClose = self.onClose
            self.onClose = nil
            onNotification = nil
            onClose?(error)
        }
    }

    private func report(_ completion: ConnectionStateMachine.Completion) {
        completions.removeValue(forKey: completion.id)?(completion.result)
    }

    private func tearDown() {
        deadline?.close()
        deadline = nil
        poll?.close()
        poll = nil
        if let connection { PQfinish(connection) }
        connection = nil
        needsFlush = false
    }

    private func send(_ plan: ConnectionStateMachine.Plan) {
        guard let connection else { preconditionFailure("send on a connection without a socket") }
        var sent = true
        switch plan {
        case .simple(_, let sql):
            if PQpipelineStatus(connection) != PQ_PIPELINE_OFF { sent = PQexitPipelineMode(connection) == 1 }
            sent = sent && PQsendQuery(connection, sql) == 1
        case .pipeline(_, let steps):
            if PQpipelineStatus(connection) == PQ_PIPELINE_OFF { sent = PQenterPipelineMode(connection) == 1 }
            for step in steps where sent {
                sent = sendStep(step, on: connection)
            }
            sent = sent && PQpipelineSync(connection) == 1
        }
        guard sent else {
            return perform(machine.failed(PostgresError(.connectionLost, LibPQ.message(connection))))
        }
        if let milliseconds = configuration.operationTimeoutMilliseconds {
            let timer = deadline ?? Timer(loop: loop)
            deadline = timer
            let id = plan.id
            timer.start(after: UInt64(max(1, milliseconds))) { [unowned self] in
                perform(machine.deadlineExceeded(id))
            }
        }
        flush()
    }

    private func sendStep(_ step: ConnectionStateMachine.Step, on connection: OpaquePointer) -> Bool {
        switch step {
        case .prepare(let name, let sql, let count):
            return PQsendPrepare(connection, name, sql, Int32(count), nil) == 1
        case .execute(let statement):
            let parameterBytes = statement.parameters.reduce(0) { $0 + ($1?.utf8.count ?? 0) }
            if parameterBytes > Self.largeBufferBytes { holdsLargeBuffers = true }
            return withCStringArray(statement.parameters) { values in
                let count = Int32(statement.parameters.count)
                if let name = statement.preparedName {
                    return PQsendQueryPrepared(connection, name, count, values, nil, nil, 0) == 1
                }
                return PQsendQueryParams(connection, statement.sql, count, nil, values, nil, nil, 0) == 1
            }
        }
    }

    private func flush() {
        guard let connection else { return }
        switch PQflush(connection) {
        case 0: needsFlush = false
        case 1: needsFlush = true
        default:
            return perform(machine.failed(PostgresError(.connectionLost, LibPQ.message(connection))))
        }
        updateInterest()
    }

    private func updateInterest() {
        guard let poll else { return }
        let wanted: PollEvents = needsFlush ? [.readable, .writable] : .readable
        guard wanted != interest else { return }
        interest = wanted
        poll.watch(wanted) { [self] result in socketReady(result) }
    }

    // MARK: - Reading

    private func socketReady(_ result: Result<PollEvents, LoopError>) {
        switch result {
        case .failure(let error):
            perform(machine.failed(PostgresError(.connectionLost, "socket error: \(error)")))
        case .success(let events):
            if events.contains(.readable) { read() }
            // libpq asks to read before retrying a flush the server is not draining.
            if needsFlush { flush() }
        }
    }

    private func read() {
        guard let connection else { return }
        guard PQconsumeInput(connection) == 1 else {
            return perform(machine.failed(PostgresError(.connectionLost, LibPQ.message(connection))))
        }
        deliverNotifications()
        while machine.isBusy, let connection = self.connection, PQisBusy(connection) == 0 {
            let result = PQgetResult(connection)
            if let result, PQresultMemorySize(result) > Self.largeBufferBytes { holdsLargeBuffers = true }
            perform(machine.resultReceived(LibPQ.event(from: result)))
        }
        deliverNotifications()
    }

    private func deliverNotifications() {
        while let connection, let notify = PQnotifies(connection) {
            let notification = PostgresNotification(
                channel: String(cString: notify.pointee.relname), payload: String(cString: notify.pointee.extra),
                senderPID: notify.pointee.be_pid)
            PQfreemem(notify)
            onNotification?(notification)
        }
    }
}
