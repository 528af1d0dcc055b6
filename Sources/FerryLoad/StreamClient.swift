import FerryHTTP
import FerryLoop

/// Which of Ferry's stream endpoints a client opens.
public enum StreamTransport: String, Sendable, CaseIterable {
    /// `GET /v1/stream`, RFC 6455.
    case webSocket = "websocket"
    /// `GET /v1/events`, Server-Sent Events.
    case serverSentEvents = "sse"

    /// The request path.
    public var path: String { self == .webSocket ? "/v1/stream" : "/v1/events" }
}

/// One stream to open: its number (the line of the token file), its token and the
/// local address to connect from.
public struct StreamOrder: Sendable {
    /// The stream's number, reported with every cue it receives.
    public var index: Int
    /// The access token the stream authenticates with.
    public var token: String
    /// The source address to bind, or nil for the kernel's choice.
    public var source: SocketAddress?

    /// Creates an order.
    public init(index: Int, token: String, source: SocketAddress?) {
        self.index = index
        self.token = token
        self.source = source
    }
}

/// A loop's share of client streams: opens them with bounded concurrency, answers
/// their pings, and records when each cue arrives. Loop thread only (reports are
/// read with ``EventLoop/execute(_:)``); unchecked-Sendable so tasks for its loop can
/// carry it.
public final class StreamSet: @unchecked Sendable {
    /// The loop every stream of the set lives on.
    public let loop: EventLoop
    /// The server's address.
    public let server: SocketAddress
    /// The transport every stream uses.
    public let transport: StreamTransport
    /// Streams handshaking at once at most (a bounded burst keeps the server's accept
    /// backlog from overflowing, which would cost a SYN retry of a second or more).
    public let maximumOpening: Int
    /// Whether each cue's arrival is kept in ``arrivals`` (the latency run needs them).
    public let recordsArrivals: Bool

    /// Streams that answered with their hello.
    public private(set) var opened = 0
    /// Streams that could not open (connect, handshake or an early close), by reason.
    public private(set) var failures: [String: Int] = [:]
    /// Streams that closed after their hello.
    public private(set) var dropped = 0
    /// `(stream index, monotonic ns)` for every cue, when ``recordsArrivals``.
    public private(set) var arrivals: [(index: Int32, at: UInt64)] = []
    /// Called once when every order has opened or failed.
    public var onSettled: (() -> Void)?
    /// Called with a stream's index when its hello arrives (the fleet pulls then).
    public var onOpened: ((Int) -> Void)?
    /// Called with a stream's index for every cue.
    public var onCue: ((Int) -> Void)?
    /// Called with a stream's index when it could not open or closed after opening.
    public var onEnded: ((Int) -> Void)?

    private var streams: [StreamClient] = []
    /// The latest stream of each index opened through ``add(_:)`` (the fleet's, which reconnect).
    private var current: [Int: StreamClient] = [:]
    private var orders: [StreamOrder] = []
    private var nextOrder = 0
    private var opening = 0

    /// Creates an empty set; call ``open(_:)`` on `loop`.
    public init(
        loop: EventLoop, server: SocketAddress, transport: StreamTransport, maximumOpening: Int = 256,
        recordsArrivals: Bool = false
    ) {
        self.loop = loop
        self.server = server
        self.transport = transport
        self.maximumOpening = max(1, maximumOpening)
        self.recordsArrivals = recordsArrivals
    }

    /// Streams that opened or failed so far.
    public var settled: Int { opened + failures.values.reduce(0, +) }

    /// Streams open now (hello received, not closed).
    public var openNow: Int { opened - dropped }

    /// Opens `orders`, at most ``maximumOpening`` handshakes at a time.
    public func open(_ orders: [StreamOrder]) {
        loop.preconditionInEventLoop()
        self.orders = orders
        streams.reserveCapacity(orders.count)
        if orders.isEmpty { onSettled?() }
        startMore()
    }

    /// Streams whose latest cue arrived at or after `since` (monotonic ns), and the latest arrival.
    public func cued(since: UInt64) -> (count: Int, latest: UInt64) {
        loop.preconditionInEventLoop()
        var count = 0
        var latest: UInt64 = 0
        for stream in streams where stream.lastCueAt >= since && stream.lastCueAt > 0 {
            count += 1
            latest = max(latest, stream.lastCueAt)
        }
        return (count, latest)
    }

    /// Opens one more stream at once, past the handshake bound (the fleet's devices
    /// open and reopen their own, already spread in time).
    public func add(_ order: StreamOrder) {
        loop.preconditionInEventLoop()
        let stream = StreamClient(order: order, set: self)
        current[order.index] = stream
        stream.ownsSettling = false
        stream.connect()
    }

    /// Closes the stream ``add(_:)`` opened for `index`, if it is still there.
    public func close(index: Int) {
        loop.preconditionInEventLoop()
        current.removeValue(forKey: index)?.closeQuietly()
    }

    /// Closes every stream.
    public func closeAll() {
        loop.preconditionInEventLoop()
        nextOrder = orders.count
        for stream in streams { stream.connection?.close() }
        for stream in current.values { stream.closeQuietly() }
        current = [:]
    }

    private func startMore() {
        while opening < maximumOpening && nextOrder < orders.count {
            let order = orders[nextOrder]
            nextOrder += 1
            opening += 1
            let stream = StreamClient(order: order, set: self)
            streams.append(stream)
            stream.connect()
        }
    }

    // MARK: - Reports from the streams

    fileprivate func streamOpened(_ stream: StreamClient) {
        opened += 1
        guard stream.ownsSettling else { return reportOpened(stream) }
        finishedOpening()
    }

    fileprivate func streamFailed(_ stream: StreamClient, _ reason: String) {
        failures[reason, default: 0] += 1
        guard stream.ownsSettling else { return reportEnded(stream) }
        finishedOpening()
    }

    fileprivate func streamDropped(_ stream: StreamClient) {
        dropped += 1
        if !stream.ownsSettling { reportEnded(stream) }
    }

    fileprivate func streamCued(_ stream: StreamClient, at time: UInt64) {
        if recordsArrivals { arrivals.append((Int32(stream.index), time)) }
        if !stream.ownsSettling && current[stream.index] === stream { onCue?(stream.index) }
    }

    fileprivate func streamDroppedQuietly() { dropped += 1 }

    private func reportOpened(_ stream: StreamClient) {
        if current[stream.index] === stream { onOpened?(stream.index) }
    }

    private func reportEnded(_ stream: StreamClient) {
        guard current[stream.index] === stream else { return }
        current[stream.index] = nil
        onEnded?(stream.index)
    }

    private func finishedOpening() {
        opening -= 1
        startMore()
        if settled == orders.count { onSettled?() }
    }
}

/// One client stream: the handshake, then the server's messages. Owned by its ``StreamSet``.
final class StreamClient: TCPConnectionDelegate {
    private enum Phase { case connecting, awaitingHead, awaitingHello, open, closed }

    let index: Int
    private(set) var connection: TCPConnection?
    private(set) var lastCueAt: UInt64 = 0
    /// Whether the stream counts toward its set's bounded opening (``StreamSet/open(_:)``), or was added alone.
    var ownsSettling = true
    private unowned let set: StreamSet
    private var phase = Phase.connecting
    private var token: String?
    private var source: SocketAddress?
    private var key = ""
    private var head: [UInt8] = []
    private var frames: WebSocketClientDecoder?
    private var events: ServerSentEventsDecoder?
    private var chunks: ChunkedBodyDecoder?

    init(order: StreamOrder, set: StreamSet) {
        index = order.index
        token = order.token
        source = order.source
        self.set = set
    }

    func connect() {
        TCPConnection.connect(on: set.loop, to: set.server, from: source) { [self] result in
            switch result {
            case .failure(let error):
                fail("connect: \(error.name)")
            case .success(let connection):
                self.connection = connection
                connection.delegate = self
                phase = .awaitingHead
                sendRequest(on: connection)
                connection.startReading()
            }
        }
    }

    private func sendRequest(on connection: TCPConnection) {
        let host = set.server.description
        let token = self.token ?? ""
        self.token = nil
        switch set.transport {
        case .webSocket:
            key = WebSocketClientHandshake.makeKey()
            connection.write(
                WebSocketClientHandshake.request(path: set.transport.path, host: host, key: key, token: token))
        case .serverSentEvents:
            connection.write(
                "GET \(set.transport.path) HTTP/1.1\r\nHost: \(host)\r\nAccept: text/event-stream\r\n"
                    + "Authorization: Bearer \(token)\r\n\r\n")
        }
    }

    // MARK: - TCPConnectionDelegate

    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        // Timed as the bytes arrive, before any parsing.
        let now = MonotonicClock.now()
        switch phase {
        case .awaitingHead:
            head.append(contentsOf: bytes)
            switch HTTPResponseHead.parse(head[...]) {
            case .incomplete:
                return
            case .invalid:
                return fail("invalid response head")
            case .complete(let response):
                let rest = Array(head[response.length...])
                head = []
                guard accept(response) else { return }
                phase = .awaitingHello
                readBody(rest, at: now)
            }
        case .awaitingHello, .open:
            readBody(bytes, at: now)
        case .connecting, .closed:
            return
        }
    }

    func connectionDidReachEnd(_ connection: TCPConnection) {
        connection.close()
    }

    func connectionDidDrain(_ connection: TCPConnection) {}

    func connectionDidClose(_ connection: TCPConnection, error: LoopError?) {
        self.connection = nil
        switch phase {
        case .open:
            phase = .closed
            set.streamDropped(self)
        case .closed:
            return
        case .connecting, .awaitingHead, .awaitingHello:
            fail(error.map { "closed: \($0.name)" } ?? "closed before hello")
        }
    }

    // MARK: - Messages

    private func accept(_ response: HTTPResponseHead) -> Bool {
        switch set.transport {
        case .webSocket:
            guard WebSocketClientHandshake.accepts(response, key: key) else {
                fail("handshake answered \(response.status)")
                return false
            }
            frames = WebSocketClientDecoder()
        case .serverSentEvents:
            guard response.status == 200,
                response.headers["content-type"]?.lowercased().hasPrefix("text/event-stream") == true
            else {
                fail("events answered \(response.status)")
                return false
            }
            events = ServerSentEventsDecoder()
            if response.headers["transfer-encoding"]?.lowercased().contains("chunked") == true {
                chunks = ChunkedBodyDecoder()
            }
        }
        return true
    }

    private func readBody(_ bytes: some Collection<UInt8>, at time: UInt64) {
        do {
            if frames != nil {
                frames!.append(bytes)
                while let event = try frames!.next() {
                    switch event {
                    case .text(let json): received(type: messageType(ofJSON: json), at: time)
                    case .ping(let payload): connection?.write(WebSocketClientFrame.pong(payload))
                    case .close(let code, _):
                        connection?.write(WebSocketClientFrame.close(code: code ?? 1000))
                        return close(reason: "server closed (\(code.map(String.init) ?? "no code"))")
                    case .pong, .binary: break
                    }
                }
            } else if events != nil {
                let body = try chunks.map { _ in try chunks!.decode(bytes) } ?? Array(bytes)
                for event in try events!.decode(body) {
                    guard case .message(let type, _) = event else { continue }
                    received(type: type, at: time)
                    if type == "closed" { return close(reason: "server closed") }
                }
            }
        } catch {
            close(reason: "protocol error: \(error)")
        }
    }

    private func received(type: String?, at time: UInt64) {
        switch type {
        case "hello":
            guard phase == .awaitingHello else { return }
            phase = .open
            set.streamOpened(self)
        case "cue":
            guard phase == .open else { return }
            lastCueAt = time
            set.streamCued(self, at: time)
        default:
            return
        }
    }

    /// Closes the stream without reporting its end to the set (the device closed it on purpose).
    func closeQuietly() {
        if phase == .open { set.streamDroppedQuietly() }
        phase = .closed
        connection?.close()
    }

    private func close(reason: String) {
        if phase == .open {
            phase = .closed
            set.streamDropped(self)
        } else if phase != .closed {
            fail(reason)
        }
        connection?.close()
    }

    private func fail(_ reason: String) {
        guard phase != .closed && phase != .open else { return }
        phase = .closed
        frames = nil
        events = nil
        chunks = nil
        set.streamFailed(self, reason)
        connection?.close()
    }
}
