/// Bounds on what one client may make the server hold, with PROTOCOL.md's defaults.
public struct HTTPLimits: Sendable, Equatable {
    /// The largest request body, after de-chunking (`413 payload_too_large` above it). Default 1 MiB.
    public var maxBodyBytes: Int
    /// The most bytes of header names and values in one request (`431 headers_too_large`). Default 16 KiB.
    public var maxHeaderBytes: Int
    /// The most header fields in one request (`431 headers_too_large`). Default 100: a
    /// field costs more to hold than its bytes on the wire, so 16 KiB of empty fields
    /// would be thousands of them.
    public var maxHeaderFields: Int
    /// The longest request target (`414 uri_too_long`). Default 8 KiB.
    public var maxURLBytes: Int
    /// How many requests of one connection may be received but not yet answered;
    /// beyond it the server stops reading that connection until answers go out. Default 16.
    public var maxPipelinedRequests: Int
    /// How many bytes of answers one connection may have queued for writing (not yet
    /// taken by the kernel). Past it the server stops reading and decoding that
    /// connection's requests until the queue drains to a quarter of it, and closes
    /// the connection when its client takes none of those bytes for the idle timeout.
    /// A taken-over connection (a stream) stops reading past it too. Default 256 KiB.
    public var maxUnsentBytes: Int

    /// Creates limits; every argument defaults to PROTOCOL.md's figure.
    public init(
        maxBodyBytes: Int = 1 << 20, maxHeaderBytes: Int = 16 << 10, maxHeaderFields: Int = 100,
        maxURLBytes: Int = 8 << 10, maxPipelinedRequests: Int = 16, maxUnsentBytes: Int = 256 << 10
    ) {
        precondition(
            maxBodyBytes >= 0 && maxHeaderBytes > 0 && maxHeaderFields > 0 && maxURLBytes > 0,
            "limits must be positive")
        precondition(maxPipelinedRequests > 0, "at least one request must be allowed in flight")
        precondition(maxUnsentBytes > 0, "at least one byte must be allowed to wait for the client")
        self.maxBodyBytes = maxBodyBytes
        self.maxHeaderBytes = maxHeaderBytes
        self.maxHeaderFields = maxHeaderFields
        self.maxURLBytes = maxURLBytes
        self.maxPipelinedRequests = maxPipelinedRequests
        self.maxUnsentBytes = maxUnsentBytes
    }
}
