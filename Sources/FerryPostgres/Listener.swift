import FerryLoop

/// A dedicated connection that `LISTEN`s on channels and comes back when it drops. Loop thread only.
///
/// Notifications are delivered on the loop. While the connection is down, `NOTIFY`s
/// are lost: the listener reconnects with capped exponential backoff (with jitter),
/// listens again, and then calls ``onGap`` so callers treat that window as lost
/// (Ferry cues every open stream). ``isConnected`` serves readiness probes.
///
/// The decisions are a ``ListenerStateMachine``'s; the listener performs its actions
/// (opens the connection, sends `LISTEN`, arms the retry timer, calls the owner).
public final class Listener {
    /// Whether the listener currently listens.
    public enum State: Sendable, Equatable {
        /// Connected and listening on every channel.
        case connected
        /// Down; a reconnect is scheduled.
        case disconnected
    }

    /// The first reconnect delay unless told otherwise, in milliseconds: a dropped
    /// connection is tried again about a tenth of a second later.
    public static let defaultMinimumBackoffMilliseconds: UInt64 = 100
    /// The longest reconnect delay unless told otherwise, in milliseconds. A failover
    /// takes seconds (docs/HA.md): a delay grown past half a second would keep the
    /// listener, and so `/readyz`, down that much longer after the new primary answers,
    /// while two attempts a second per gateway cost a down server nothing.
    public static let defaultMaximumBackoffMilliseconds: UInt64 = 500

    /// The loop the listener belongs to.
    public let loop: EventLoop
    /// How the connection is opened.
    public let configuration: PostgresConfiguration
    /// The channels listened to.
    public let channels: [String]
    /// The first reconnect delay in milliseconds; doubled after each failed attempt.
    public var minimumBackoffMilliseconds: UInt64 { machine.minimumBackoffMilliseconds }
    /// The longest reconnect delay in milliseconds.
    public var maximumBackoffMilliseconds: UInt64 { machine.maximumBackoffMilliseconds }

    /// Called for every notification on one of ``channels``.
    public var onNotification: ((PostgresNotification) -> Void)?
    /// Called when the listener becomes connected (listening) or disconnected.
    public var onStateChange: ((State) -> Void)?
    /// Called after every reconnect (not the first connect): notifications may have been lost meanwhile.
    public var onGap: (() -> Void)?

    /// Whether the listener is connected and listening now.
    public var isConnected: Bool { machine.isListening }
    /// The backend process id of the listening connection, while connected.
    public var backendPID: Int32? { isConnected ? connection?.backendPID : nil }

    private var machine: ListenerStateMachine
    /// The connection being subscribed or listening.
    private var connection: PostgresConnection?
    private var retryTimer: Timer?

    /// Creates a stopped listener; call ``start()``.
    public init(
        loop: EventLoop, configuration: PostgresConfiguration, channels: [String],
        minimumBackoffMilliseconds: UInt64 = Listener.defaultMinimumBackoffMilliseconds,
        maximumBackoffMilliseconds: UInt64 = Listener.defaultMaximumBackoffMilliseconds
    ) {
        self.loop = loop
        self.configuration = configuration
        self.channels = channels
        machine = ListenerStateMachine(
            channels: channels, minimumBackoffMilliseconds: minimumBackoffMilliseconds,
            maximumBackoffMilliseconds: maximumBackoffMilliseconds, jitter: { UInt64.random(in: 0...$0) })
    }

    /// Connects and listens; keeps reconnecting until ``stop()``.
    public func start() {
        loop.preconditionInEventLoop()
        perform(machine.start())
    }

    /// Closes the connection and stops reconnecting, for good. Reports
    /// ``State/disconnected`` if it was connected.
    public func stop() {
        loop.preconditionInEventLoop()
        perform(machine.close())
    }

    // MARK: - Performing actions

    private func perform(_ action: ListenerStateMachine.Action) {
        switch action {
        case .none:
            break
        case .connect:
            connect()
        case .listen(let sql):
            listen(sql)
        case .deliver(let notification):
            onNotification?(notification)
        case .reportListening(let gap):
            onStateChange?(.connected)
            if gap { onGap?() }
        case .retry(let milliseconds):
            scheduleRetry(after: milliseconds)
        case .closeConnectionAndRetry(let milliseconds):
            closeConnection()
            scheduleRetry(after: milliseconds)
        case .reportDownAndRetry(let milliseconds):
            connection = nil
            onStateChange?(.disconnected)
            scheduleRetry(after: milliseconds)
        case .closeConnection:
            closeConnection()
        case .closeConnectionAndReportDown:
            closeConnection()
            onStateChange?(.disconnected)
        case .cancelRetry:
            retryTimer?.close()
            retryTimer = nil
        }
    }

    private func connect() {
        PostgresConnection.connect(on: loop, configuration: configuration) { [self] result in
            switch result {
            case .success(let opened):
                connection = opened
                perform(machine.connectSucceeded())
            case .failure:
                perform(machine.connectFailed(now: loop.now))
            }
        }
    }

    private func listen(_ sql: String) {
        guard let connection else { preconditionFailure("LISTEN without a connection") }
        connection.onNotification = { [weak self] notification in
            guard let self else { return }
            perform(machine.notificationReceived(notification))
        }
        connection.execute(sql) { [self] result in
            // An answer on a connection already given up (closed by stop()) changes nothing.
            guard connection === self.connection else { return }
            switch result {
            case .success:
                connection.onClose = { [weak self, unowned connection] _ in self?.dropped(connection) }
                perform(machine.listenSucceeded())
            case .failure:
                perform(machine.listenFailed(now: loop.now))
            }
        }
    }

    private func dropped(_ dropped: PostgresConnection) {
        guard dropped === connection else { return }
        perform(machine.connectionLost(now: loop.now))
    }

    private func closeConnection() {
        guard let connection else { return }
        self.connection = nil
        connection.onClose = nil
        connection.onNotification = nil
        connection.close()
    }

    private func scheduleRetry(after milliseconds: UInt64) {
        retryTimer = loop.schedule(after: milliseconds) { [weak self] in
            guard let self else { return }
            retryTimer = nil
            perform(machine.retryTimerFired(now: loop.now))
        }
    }
}
