import FerryLoop

/// A dedicated connection that `LISTEN`s on channels and comes back when it drops. Loop thread only.
///
/// Notifications are delivered on the loop. While the connection is down, `NOTIFY`s
/// are lost: the listener reconnects with capped exponential backoff (with jitter),
/// listens again, and then calls ``onGap`` so callers treat that window as lost
/// (Ferry cues every open stream). ``isConnected`` serves readiness probes.
public final class Listener {
    /// Whether the listener currently listens.
    public enum State: Sendable, Equatable {
        /// Connected and listening on every channel.
        case connected
        /// Down; a reconnect is scheduled.
        case disconnected
    }

    /// The loop the listener belongs to.
    public let loop: EventLoop
    /// How the connection is opened.
    public let configuration: PostgresConfiguration
    /// The channels listened to.
    public let channels: [String]
    /// The first reconnect delay in milliseconds; doubled after each failed attempt.
    public let minimumBackoffMilliseconds: UInt64
    /// The longest reconnect delay in milliseconds.
    public let maximumBackoffMilliseconds: UInt64

    /// Called for every notification on one of ``channels``.
    public var onNotification: ((PostgresNotification) -> Void)?
    /// Called when the listener becomes connected (listening) or disconnected.
    public var onStateChange: ((State) -> Void)?
    /// Called after every reconnect (not the first connect): notifications may have been lost meanwhile.
    public var onGap: (() -> Void)?

    /// Whether the listener is connected and listening now.
    public private(set) var isConnected = false
    /// The backend process id of the listening connection, while connected.
    public var backendPID: Int32? { isConnected ? connection?.backendPID : nil }

    private var connection: PostgresConnection?
    private var hasListened = false
    private var running = false
    private var backoff: UInt64
    private var retryTimer: Timer?

    /// Creates a stopped listener; call ``start()``.
    public init(
        loop: EventLoop, configuration: PostgresConfiguration, channels: [String],
        minimumBackoffMilliseconds: UInt64 = 100, maximumBackoffMilliseconds: UInt64 = 5_000
    ) {
        precondition(!channels.isEmpty, "a listener needs at least one channel")
        self.loop = loop
        self.configuration = configuration
        self.channels = channels
        self.minimumBackoffMilliseconds = minimumBackoffMilliseconds
        self.maximumBackoffMilliseconds = max(minimumBackoffMilliseconds, maximumBackoffMilliseconds)
        self.backoff = minimumBackoffMilliseconds
    }

    /// Connects and listens; keeps reconnecting until ``stop()``.
    public func start() {
        loop.preconditionInEventLoop()
        guard !running else { return }
        running = true
        connect()
    }

    /// Closes the connection and stops reconnecting. Reports ``State/disconnected`` if it was connected.
    public func stop() {
        loop.preconditionInEventLoop()
        guard running else { return }
        running = false
        retryTimer?.close()
        retryTimer = nil
        if let connection {
            connection.onClose = nil
            connection.onNotification = nil
            connection.close()
        }
        connection = nil
        setDisconnected()
    }

    // MARK: - Internals

    private func connect() {
        PostgresConnection.connect(on: loop, configuration: configuration) { [self] result in
            guard running else {
                if case .success(let connection) = result { connection.close() }
                return
            }
            switch result {
            case .failure:
                scheduleReconnect()
            case .success(let connection):
                listen(on: connection)
            }
        }
    }

    private func listen(on connection: PostgresConnection) {
        let sql = channels.map { "LISTEN \(Self.quoted($0))" }.joined(separator: "; ")
        connection.onNotification = { [weak self] in self?.onNotification?($0) }
        connection.execute(sql) { [self] result in
            guard running else { return connection.close() }
            guard case .success = result else {
                connection.close()
                return scheduleReconnect()
            }
            connection.onClose = { [weak self, unowned connection] _ in self?.dropped(connection) }
            self.connection = connection
            isConnected = true
            backoff = minimumBackoffMilliseconds
            onStateChange?(.connected)
            if hasListened { onGap?() }
            hasListened = true
        }
    }

    private func dropped(_ dropped: PostgresConnection) {
        guard running, dropped === connection else { return }
        connection = nil
        setDisconnected()
        scheduleReconnect()
    }

    private func setDisconnected() {
        guard isConnected else { return }
        isConnected = false
        onStateChange?(.disconnected)
    }

    private func scheduleReconnect() {
        guard running else { return }
        // Up to 20 % jitter, so gateways that lost the same server do not come back in step.
        let delay = backoff + UInt64.random(in: 0...(backoff / 5))
        backoff = min(backoff * 2, maximumBackoffMilliseconds)
        let timer = retryTimer ?? Timer(loop: loop)
        retryTimer = timer
        timer.start(after: delay) { [weak self] in
            guard let self, running else { return }
            connect()
        }
    }

    /// Quotes a channel name as an SQL identifier.
    static func quoted(_ identifier: String) -> String {
        "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
