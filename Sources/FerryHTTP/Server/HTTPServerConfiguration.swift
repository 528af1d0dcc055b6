/// Where and how an ``HTTPServer`` listens.
public struct HTTPServerConfiguration: Sendable {
    /// A numeric IPv4 or IPv6 address to bind (`0.0.0.0`, `::`, `127.0.0.1`).
    public var host: String
    /// The port; 0 picks a free one (read it back from ``HTTPServer/start()``).
    public var port: Int
    /// Size limits for requests.
    public var limits: HTTPLimits
    /// How long a request head may take: from connection open for the first request,
    /// from its first byte for later ones. On expiry the connection is closed without
    /// a response (no 408: a client this slow is usually not reading either).
    public var headTimeout: Duration
    /// How long a keep-alive connection may sit with nothing in flight, and how long a
    /// request body may go without a byte, before the connection is closed.
    public var idleTimeout: Duration
    /// How long a request body may take from its head (or its `100 Continue`), however
    /// steadily it arrives: on expiry it is answered `408 request_timeout` and the
    /// connection closes. Bounds how long a body holds its share of
    /// ``HTTPLimits/maxBufferedBodyBytes``.
    public var bodyTimeout: Duration
    /// The listen backlog of each loop's socket.
    public var backlog: Int32
    /// Whether other processes may serve the same address: every loop's socket has
    /// `SO_REUSEPORT` either way, and the kernel lets any process of the same user
    /// join them. When false, ``HTTPServer/start()`` refuses an address that another
    /// socket serves (`EADDRINUSE`).
    public var sharesPort = false
    /// The proxies in front: a connection from one of them must start with a PROXY
    /// protocol header, whose client its requests then come from. Default none: every
    /// client is its TCP peer.
    public var trustedProxies = TrustedProxies.none
    /// The web origins whose pages may call the server from a browser (``CORSPolicy``);
    /// default none.
    public var cors = CORSPolicy.none

    /// Creates a configuration; the defaults suit a production gateway behind a balancer.
    public init(
        host: String = "0.0.0.0", port: Int = 8080, limits: HTTPLimits = HTTPLimits(),
        headTimeout: Duration = .seconds(10), idleTimeout: Duration = .seconds(75),
        bodyTimeout: Duration = .seconds(60), backlog: Int32 = 1024
    ) {
        self.host = host
        self.port = port
        self.limits = limits
        self.headTimeout = headTimeout
        self.idleTimeout = idleTimeout
        self.bodyTimeout = bodyTimeout
        self.backlog = backlog
    }
}

extension Duration {
    /// Whole nanoseconds, saturating (timeouts are never negative).
    var nanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        guard seconds >= 0 else { return 0 }
        let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? UInt64.max / 2 : whole + UInt64(attoseconds / 1_000_000_000)
    }
}
