import FerryHTTP
import FerryLoop

/// What one request came back with: a status and a body, or a transport failure.
public enum HTTPClientOutcome {
    /// The server answered.
    case answered(status: Int, body: [UInt8])
    /// The connection failed or closed before an answer (the reason, short).
    case failed(String)

    /// Whether the same request may succeed if sent again, as a device's sync engine
    /// retries it: a transport failure, a `5xx` (a gateway's pool or hasher full,
    /// `503 unavailable`) or a `429`. Any other answer is final.
    public var isRetryable: Bool {
        switch self {
        case .failed: true
        case .answered(let status, _): status >= 500 || status == 429
        }
    }

    /// The wait before retry number `retries` (1, 2, …) of a retryable request: 200 ms
    /// doubling up to 5 s, plus `jitterMilliseconds`.
    public static func retryDelay(retries: Int, jitterMilliseconds: UInt64 = 0) -> UInt64 {
        min(UInt64(5_000), UInt64(100) << UInt64(min(max(retries, 1), 6))) + jitterMilliseconds
    }
}

/// A keep-alive HTTP/1.1 client connection for one device: one request at a time,
/// connecting (again) when needed, `Content-Length` or chunked answers. Loop thread only.
public final class HTTPClientConnection: TCPConnectionDelegate {
    /// The loop the connection runs on.
    public let loop: EventLoop
    /// The server (may change between requests: the fleet moves to another gateway).
    public var server: SocketAddress
    /// The local address to connect from, nil for the kernel's choice.
    public let source: SocketAddress?
    private var connection: TCPConnection?
    private var connecting = false
    private var request: [UInt8]?
    private var completion: ((HTTPClientOutcome) -> Void)?
    private var inbox: [UInt8] = []
    private var head: HTTPResponseHead?
    private var chunks: ChunkedBodyDecoder?
    private var body: [UInt8] = []

    /// A connection to `server` from `source`, opened at the first request.
    public init(loop: EventLoop, server: SocketAddress, source: SocketAddress?) {
        self.loop = loop
        self.server = server
        self.source = source
    }

    /// Whether a request is in flight.
    public var isBusy: Bool { completion != nil }

    /// Sends a request and calls `completion` on the loop once with its outcome.
    public func send(
        _ method: String, _ path: String, token: String?, body: String? = nil,
        _ completion: @escaping (HTTPClientOutcome) -> Void
    ) {
        loop.preconditionInEventLoop()
        precondition(self.completion == nil, "one request at a time on a device's connection")
        var text = "\(method) \(path) HTTP/1.1\r\nHost: \(server)\r\n"
        if let token { text += "Authorization: Bearer \(token)\r\n" }
        if let body {
            text += "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        } else {
            text += "Content-Length: 0\r\n\r\n"
        }
        request = Array(text.utf8)
        self.completion = completion
        if let connection, connection.isOpen {
            write()
        } else if !connecting {
            connect()
        }
    }

    /// Closes the connection (a request in flight fails).
    public func close() {
        connection?.close()
    }

    private func connect() {
        connecting = true
        TCPConnection.connect(on: loop, to: server, from: source) { [self] result in
            connecting = false
            switch result {
            case .failure(let error):
                finish(.failed("connect: \(error.name)"))
            case .success(let connection):
                self.connection = connection
                connection.delegate = self
                connection.startReading()
                write()
            }
        }
    }

    private func write() {
        guard let request, let connection else { return }
        self.request = nil
        inbox = []
        head = nil
        chunks = nil
        body = []
        connection.write(request)
    }

    private func finish(_ outcome: HTTPClientOutcome) {
        guard let completion else { return }
        self.completion = nil
        request = nil
        completion(outcome)
    }

    // MARK: - TCPConnectionDelegate

    public func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        guard completion != nil else { return }
        if head == nil {
            inbox.append(contentsOf: bytes)
            switch HTTPResponseHead.parse(inbox[...]) {
            case .incomplete: return
            case .invalid:
                connection.close()
                return finish(.failed("invalid response head"))
            case .complete(let parsed):
                head = parsed
                let rest = Array(inbox[parsed.length...])
                inbox = []
                if parsed.headers["transfer-encoding"]?.lowercased().contains("chunked") == true {
                    chunks = ChunkedBodyDecoder()
                }
                readBody(rest)
            }
        } else {
            readBody(bytes)
        }
    }

    private func readBody(_ bytes: some Collection<UInt8>) {
        guard let head else { return }
        if chunks != nil {
            do {
                body += try chunks!.decode(bytes)
            } catch {
                connection?.close()
                return finish(.failed("bad chunked body"))
            }
            if chunks!.isFinished { finish(.answered(status: head.status, body: body)) }
        } else {
            let length = head.headers["content-length"].flatMap { Int($0) } ?? 0
            body += bytes
            if body.count >= length {
                if head.headers["connection"]?.lowercased() == "close" { connection?.close() }
                finish(.answered(status: head.status, body: Array(body.prefix(length))))
            }
        }
    }

    public func connectionDidReachEnd(_ connection: TCPConnection) { connection.close() }
    public func connectionDidDrain(_ connection: TCPConnection) {}

    public func connectionDidClose(_ connection: TCPConnection, error: LoopError?) {
        if self.connection === connection { self.connection = nil }
        finish(.failed(error.map { "closed: \($0.name)" } ?? "closed"))
    }
}
