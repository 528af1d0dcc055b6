/// The protocol logic of one libpq connection, apart from any I/O.
///
/// A plain value: each `mutating func` takes what happened (a result from libpq, a
/// deadline, a broken socket) and returns the ``Action`` the driver
/// (``PostgresConnection``) must perform. It keeps the FIFO of operations (one is in
/// flight at a time; libpq runs one query or one pipeline at once), the cache of
/// statements prepared on this connection, and how far the in-flight operation got.
package struct ConnectionStateMachine: Sendable {
    /// Identifies one operation on one connection, in the order operations were asked for.
    package typealias OperationID = UInt64

    /// What an operation asks the server to do.
    package enum Request: Sendable, Equatable {
        /// Extended-protocol statements in pipeline mode, all before one Sync (one implicit transaction).
        case pipeline([PostgresStatement])
        /// A simple-protocol query string, possibly several statements.
        case simple(String)
    }

    /// One thing to send for an operation in pipeline mode.
    package enum Step: Sendable, Equatable {
        /// `PQsendPrepare` of a named statement not yet prepared on this connection.
        case prepare(name: String, sql: String, parameterCount: Int)
        /// `PQsendQueryPrepared` when the statement has a name, else `PQsendQueryParams`.
        case execute(PostgresStatement)
    }

    /// What the driver writes for one operation.
    package enum Plan: Sendable, Equatable {
        /// Enter pipeline mode, send the steps, then `PQpipelineSync`.
        case pipeline(OperationID, [Step])
        /// Leave pipeline mode and `PQsendQuery`.
        case simple(OperationID, String)

        /// The operation this plan belongs to.
        package var id: OperationID {
            switch self {
            case .pipeline(let id, _), .simple(let id, _): return id
            }
        }
    }

    /// What `PQgetResult` returned, already converted.
    package enum ResultEvent: Sendable, Equatable {
        /// `PGRES_TUPLES_OK`, `PGRES_COMMAND_OK` or `PGRES_EMPTY_QUERY`.
        case result(PostgresResult)
        /// `PGRES_FATAL_ERROR` (or anything unusable), with the error.
        case failure(PostgresError)
        /// `PGRES_PIPELINE_ABORTED`: this step was skipped after an earlier error.
        case pipelineAborted
        /// NULL: the current query's results are complete.
        case end
        /// `PGRES_PIPELINE_SYNC`: the pipeline's Sync was processed.
        case sync
    }

    /// The outcome of one operation.
    package struct Completion: Sendable, Equatable {
        /// The operation.
        package var id: OperationID
        /// Its results (one per statement for a pipeline, one per statement of the string for simple) or its error.
        package var result: Result<[PostgresResult], PostgresError>

        /// Creates a completion.
        package init(id: OperationID, result: Result<[PostgresResult], PostgresError>) {
            self.id = id
            self.result = result
        }
    }

    /// What the driver must do next.
    package enum Action: Sendable, Equatable {
        /// Nothing.
        case none
        /// Write `Plan` and arm the operation's deadline.
        case send(Plan)
        /// Report `Completion`, then write `next` if any (the driver sends first, so a callback sees a busy connection).
        case complete(Completion, next: Plan?)
        /// Close the socket, report `completion` if any, and fail every `failing` operation with `error`.
        case close(Completion?, failing: [OperationID], error: PostgresError)
        /// Report `Completion` at once: the operation was refused before it was queued,
        /// and the one in flight goes on.
        case refuse(Completion)
    }

    /// Where the in-flight operation is.
    package struct InFlight: Sendable, Equatable {
        var plan: Plan
        var stepIndex = 0
        var stepFailed = false
        var pending: PostgresResult?
        var results: [PostgresResult] = []
        var error: PostgresError?
    }

    /// The connection's state.
    package enum State: Sendable, Equatable {
        /// Waiting for `PQconnectPoll` to finish.
        case connecting
        /// Connected, nothing in flight.
        case idle
        /// One operation in flight (maybe more queued).
        case busy(InFlight)
        /// Broken or closed; every later operation fails with this error.
        case closed(PostgresError)
    }

    /// The current state.
    package private(set) var state = State.connecting
    /// Operations waiting for the in-flight one, oldest first.
    package private(set) var queue: [(OperationID, Request)] = []
    /// Names of the statements prepared on this connection.
    package private(set) var prepared: Set<String> = []
    /// Whether named statements are prepared (``PostgresConfiguration/preparesStatements``);
    /// else each is sent unnamed.
    package let preparesStatements: Bool
    private var queueHead = 0

    /// A machine for a connection being opened.
    package init(preparesStatements: Bool = true) {
        self.preparesStatements = preparesStatements
    }

    /// Whether operations may still succeed on this connection.
    package var isUsable: Bool {
        if case .closed = state { return false }
        return true
    }

    /// Whether an operation is in flight.
    package var isBusy: Bool {
        if case .busy = state { return true }
        return false
    }

    /// Operations asked for and not yet completed.
    package var pendingCount: Int {
        (isBusy ? 1 : 0) + queue.count - queueHead
    }

    // MARK: - Lifecycle

    /// The connection is up: start the oldest queued operation, if any.
    package mutating func connected() -> Action {
        guard case .connecting = state else { preconditionFailure("connected twice") }
        state = .idle
        return startNext().map(Action.send) ?? .none
    }

    /// The connection could not be opened, broke (socket error, end of stream) or was closed by its owner.
    package mutating func failed(_ error: PostgresError) -> Action {
        var failing: [OperationID] = []
        switch state {
        case .closed: return .none
        case .busy(let flight): failing.append(flight.plan.id)
        case .connecting, .idle: break
        }
        failing += drainQueue()
        state = .closed(error)
        return .close(nil, failing: failing, error: error)
    }

    /// The deadline of operation `id` passed. libpq 15 cannot cancel without blocking,
    /// so the operation fails with a timeout and the connection is given up.
    package mutating func deadlineExceeded(_ id: OperationID) -> Action {
        guard case .busy(let flight) = state, flight.plan.id == id else { return .none }
        let timeout = PostgresError(.timeout, "operation did not finish before its deadline")
        let lost = PostgresError(.connectionLost, "connection closed after an operation timed out")
        let failing = drainQueue()
        state = .closed(lost)
        return .close(Completion(id: id, result: .failure(timeout)), failing: failing, error: lost)
    }

    // MARK: - Operations

    /// The caller asks for `request` as operation `id`. A request with a NUL byte in its
    /// text is refused, whatever the state: that answer is final, a closed connection's is not.
    package mutating func enqueue(_ id: OperationID, _ request: Request) -> Action {
        if let error = request.unsendableText {
            return .refuse(Completion(id: id, result: .failure(error)))
        }
        switch state {
        case .closed(let error):
            return .complete(Completion(id: id, result: .failure(error)), next: nil)
        case .connecting, .busy:
            queue.append((id, request))
            return .none
        case .idle:
            queue.append((id, request))
            return startNext().map(Action.send) ?? .none
        }
    }

    /// `PQgetResult` returned `event` for the in-flight operation.
    package mutating func resultReceived(_ event: ResultEvent) -> Action {
        guard case .busy(var flight) = state else {
            preconditionFailure("a result arrived with no operation in flight")
        }
        switch (flight.plan, event) {
        case (_, .result(let result)):
            if case .simple = flight.plan {
                flight.results.append(result)
            } else {
                flight.pending = result
            }
        case (_, .failure(let error)):
            flight.error = flight.error ?? error
            flight.stepFailed = true
        case (.pipeline, .pipelineAborted):
            flight.stepFailed = true
            flight.error = flight.error ?? PostgresError(.server, "pipeline aborted by an earlier error")
        case (.pipeline(_, let steps), .end):
            guard flight.stepIndex < steps.count else {
                // An error after the last statement is the implicit transaction's COMMIT at
                // the Sync failing (a deferred constraint, a serialization failure): the
                // whole operation fails with it, and its results are void.
                guard flight.stepFailed else { return protocolViolation(flight, "more results than statements") }
                flight.stepFailed = false
                break
            }
            switch steps[flight.stepIndex] {
            case .prepare(let name, _, _):
                if !flight.stepFailed { prepared.insert(name) }
            case .execute:
                if let pending = flight.pending { flight.results.append(pending) }
            }
            flight.stepIndex += 1
            flight.stepFailed = false
            flight.pending = nil
        case (.pipeline(_, let steps), .sync):
            guard flight.stepIndex == steps.count else { return protocolViolation(flight, "sync before every result") }
            return finish(flight)
        case (.simple, .end):
            return finish(flight)
        case (.simple, .sync), (.simple, .pipelineAborted):
            return protocolViolation(flight, "pipeline result outside pipeline mode")
        }
        state = .busy(flight)
        return .none
    }

    // MARK: - Internals

    private mutating func finish(_ flight: InFlight) -> Action {
        let completion = Completion(
            id: flight.plan.id, result: flight.error.map { .failure($0) } ?? .success(flight.results))
        if let error = flight.error, error.endsSession {
            // FATAL: the server closes the session; do not hand out a connection that is about to break.
            let lost = PostgresError(.connectionLost, "the server ended the session: \(error.message)")
            let failing = drainQueue()
            state = .closed(lost)
            return .close(completion, failing: failing, error: lost)
        }
        state = .idle
        return .complete(completion, next: startNext())
    }

    private mutating func protocolViolation(_ flight: InFlight, _ message: String) -> Action {
        let error = PostgresError(.connectionLost, "unexpected result from libpq: \(message)")
        let failing = drainQueue()
        state = .closed(error)
        return .close(Completion(id: flight.plan.id, result: .failure(error)), failing: failing, error: error)
    }

    /// Moves the oldest queued operation in flight and plans it; nil when the queue is empty.
    private mutating func startNext() -> Plan? {
        guard case .idle = state, queueHead < queue.count else { return nil }
        let (id, request) = queue[queueHead]
        queueHead += 1
        if queueHead == queue.count {
            queue.removeAll(keepingCapacity: true)
            queueHead = 0
        }
        let plan: Plan
        switch request {
        case .simple(let sql):
            plan = .simple(id, sql)
        case .pipeline(let statements):
            var steps: [Step] = []
            var planned: Set<String> = []
            for var statement in statements {
                if !preparesStatements {
                    statement.preparedName = nil
                } else if let name = statement.preparedName, !prepared.contains(name), planned.insert(name).inserted {
                    steps.append(.prepare(name: name, sql: statement.sql, parameterCount: statement.parameters.count))
                }
                steps.append(.execute(statement))
            }
            plan = .pipeline(id, steps)
        }
        state = .busy(InFlight(plan: plan))
        return plan
    }

    private mutating func drainQueue() -> [OperationID] {
        let ids = queue[queueHead...].map(\.0)
        queue.removeAll()
        queueHead = 0
        return ids
    }
}

extension ConnectionStateMachine.Request {
    /// Why libpq cannot send the request as it is, or nil: libpq takes the SQL and every
    /// text parameter as a C string, which would end at a NUL byte and silently send
    /// less than was asked for.
    var unsendableText: PostgresError? {
        let statements: [PostgresStatement]
        switch self {
        case .simple(let sql): statements = [PostgresStatement(sql)]
        case .pipeline(let pipeline): statements = pipeline
        }
        for statement in statements {
            if statement.sql.holdsNUL {
                return PostgresError(.unsendableText, "the SQL holds a NUL byte, which PostgreSQL text cannot hold")
            }
            for (index, parameter) in statement.parameters.enumerated() where parameter?.holdsNUL == true {
                return PostgresError(
                    .unsendableText,
                    "parameter $\(index + 1) holds a NUL byte (\\u0000), which PostgreSQL text cannot hold")
            }
        }
        return nil
    }
}

extension String {
    /// Whether the text holds a NUL byte, where a C string of it would end.
    fileprivate var holdsNUL: Bool {
        utf8.withContiguousStorageIfAvailable { $0.contains(0) } ?? utf8.contains(0)
    }
}
