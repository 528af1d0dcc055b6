/// The logic of a ``Listener``, apart from any I/O: when to connect and `LISTEN`, when
/// the listener is up or down, how long to wait before the next attempt, and when
/// notifications may have been lost.
///
/// A plain value, like ``ConnectionStateMachine``: each `mutating func` takes what
/// happened and returns the ``Action`` the driver (``Listener``) must perform. Times are
/// milliseconds on the driver's monotonic clock (the loop's `now`), passed in with each
/// event that arms or checks the retry timer; the jitter comes from the source the
/// machine was made with. So tests choose both and need no socket.
///
/// Backoff: the first attempt after a failure waits the minimum; every failed attempt
/// doubles the wait, up to the maximum; each wait gets up to a fifth more at random, so
/// gateways that lost the same server do not come back in step. Listening again resets
/// it. An outage (from losing the `LISTEN` connection until listening again, however
/// many attempts it takes) ends with one ``Action/reportListening(gap:)`` whose `gap`
/// is true; the first time the machine listens is no gap.
package struct ListenerStateMachine: Sendable {
    /// Returns the extra milliseconds of one wait: a number in `0...maximum`.
    package typealias Jitter = @Sendable (_ maximum: UInt64) -> UInt64

    /// Where the listener is.
    package enum State: Sendable, Equatable {
        /// Made, not started.
        case idle
        /// A connection is being opened.
        case connecting
        /// Connected; the `LISTEN` statements are sent and not yet acknowledged.
        case subscribing
        /// Listening on every channel.
        case listening
        /// Waiting for the retry timer, which is due at `until`.
        case waiting(until: UInt64)
        /// Closed by its owner: no more attempts, ever.
        case closed
    }

    /// What the driver must do next.
    package enum Action: Sendable, Equatable {
        /// Nothing.
        case none
        /// Open a connection and report how that went.
        case connect
        /// Send `sql` (a `LISTEN` per channel) on the connection just opened.
        case listen(sql: String)
        /// Hand the notification to the owner.
        case deliver(PostgresNotification)
        /// Tell the owner the listener listens; when `gap`, also that notifications
        /// sent since the connection was lost are lost.
        case reportListening(gap: Bool)
        /// Arm the retry timer to fire after the given milliseconds.
        case retry(afterMilliseconds: UInt64)
        /// Close the connection (its `LISTEN` failed), then arm the retry timer.
        case closeConnectionAndRetry(afterMilliseconds: UInt64)
        /// Tell the owner the listener is down (the connection was lost), then arm the retry timer.
        case reportDownAndRetry(afterMilliseconds: UInt64)
        /// Close the connection: the machine was closed before it listened.
        case closeConnection
        /// Close the connection, then tell the owner the listener is down.
        case closeConnectionAndReportDown
        /// Cancel the armed retry timer.
        case cancelRetry
    }

    /// The simple query that listens on every channel.
    package let listenSQL: String
    /// The first wait after a failure, in milliseconds, before jitter.
    package let minimumBackoffMilliseconds: UInt64
    /// The longest wait, in milliseconds, before jitter.
    package let maximumBackoffMilliseconds: UInt64
    /// Where the listener is.
    package private(set) var state = State.idle
    /// The next wait, before jitter.
    package private(set) var backoffMilliseconds: UInt64
    /// Whether the machine has listened before, so that listening again ends an outage.
    package private(set) var hasListened = false
    private let jitter: Jitter

    /// A machine that will listen on `channels` (at least one); a maximum below the
    /// minimum is raised to it.
    package init(
        channels: [String], minimumBackoffMilliseconds: UInt64, maximumBackoffMilliseconds: UInt64,
        jitter: @escaping Jitter
    ) {
        precondition(!channels.isEmpty, "a listener needs at least one channel")
        listenSQL = channels.map { "LISTEN \(Self.quoted($0))" }.joined(separator: "; ")
        self.minimumBackoffMilliseconds = minimumBackoffMilliseconds
        self.maximumBackoffMilliseconds = max(minimumBackoffMilliseconds, maximumBackoffMilliseconds)
        backoffMilliseconds = minimumBackoffMilliseconds
        self.jitter = jitter
    }

    /// Whether the listener listens now.
    package var isListening: Bool { state == .listening }

    // MARK: - Owner

    /// The owner starts the listener. Starting it again, or after ``close()``, does nothing.
    package mutating func start() -> Action {
        guard state == .idle else { return .none }
        state = .connecting
        return .connect
    }

    /// The owner closes the listener, in whatever state it is.
    package mutating func close() -> Action {
        let action: Action
        switch state {
        case .idle, .connecting, .closed: action = .none
        case .subscribing: action = .closeConnection
        case .listening: action = .closeConnectionAndReportDown
        case .waiting: action = .cancelRetry
        }
        state = .closed
        return action
    }

    // MARK: - Connection

    /// The connection asked for by ``Action/connect`` is open.
    package mutating func connectSucceeded() -> Action {
        switch state {
        case .connecting:
            state = .subscribing
            return .listen(sql: listenSQL)
        case .closed:
            return .closeConnection
        case .idle, .subscribing, .listening, .waiting:
            preconditionFailure("a connection opened that was not asked for (\(state))")
        }
    }

    /// The connection asked for by ``Action/connect`` could not be opened.
    package mutating func connectFailed(now: UInt64) -> Action {
        switch state {
        case .connecting: return .retry(afterMilliseconds: wait(now: now))
        case .closed: return .none
        case .idle, .subscribing, .listening, .waiting:
            preconditionFailure("a connection failed that was not asked for (\(state))")
        }
    }

    /// The server acknowledged the `LISTEN` statements.
    package mutating func listenSucceeded() -> Action {
        switch state {
        case .subscribing:
            state = .listening
            backoffMilliseconds = minimumBackoffMilliseconds
            let gap = hasListened
            hasListened = true
            return .reportListening(gap: gap)
        case .closed:
            return .none
        case .idle, .connecting, .listening, .waiting:
            preconditionFailure("a LISTEN answered that was not sent (\(state))")
        }
    }

    /// The `LISTEN` statements failed (or the connection broke before they were answered).
    package mutating func listenFailed(now: UInt64) -> Action {
        switch state {
        case .subscribing: return .closeConnectionAndRetry(afterMilliseconds: wait(now: now))
        case .closed: return .none
        case .idle, .connecting, .listening, .waiting:
            preconditionFailure("a LISTEN failed that was not sent (\(state))")
        }
    }

    /// A notification arrived: delivered once `LISTEN` is sent, dropped otherwise.
    package func notificationReceived(_ notification: PostgresNotification) -> Action {
        switch state {
        case .subscribing, .listening: return .deliver(notification)
        case .idle, .connecting, .waiting, .closed: return .none
        }
    }

    /// The listening connection broke (the server ended the session, the network failed).
    package mutating func connectionLost(now: UInt64) -> Action {
        switch state {
        case .listening: return .reportDownAndRetry(afterMilliseconds: wait(now: now))
        case .closed: return .none
        case .idle, .connecting, .subscribing, .waiting:
            preconditionFailure("lost a connection that was not listening (\(state))")
        }
    }

    /// The retry timer fired: connect again once it is due.
    package mutating func retryTimerFired(now: UInt64) -> Action {
        switch state {
        case .waiting(let until) where now < until:
            return .retry(afterMilliseconds: until - now)
        case .waiting:
            state = .connecting
            return .connect
        case .closed:
            return .none
        case .idle, .connecting, .subscribing, .listening:
            preconditionFailure("a retry timer fired that was not armed (\(state))")
        }
    }

    // MARK: - Internals

    /// Moves to ``State/waiting(until:)`` and returns the wait: the backoff plus jitter.
    /// The backoff doubles for the next failure, up to the maximum.
    private mutating func wait(now: UInt64) -> UInt64 {
        let base = backoffMilliseconds
        let delay = saturatingSum(base, min(jitter(base / 5), base / 5))
        let cap = maximumBackoffMilliseconds
        backoffMilliseconds = base > cap / 2 ? cap : min(base * 2, cap)
        state = .waiting(until: saturatingSum(now, delay))
        return delay
    }

    private func saturatingSum(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : sum
    }

    /// Quotes a channel name as an SQL identifier.
    static func quoted(_ identifier: String) -> String {
        "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
