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
    /// Body limits of particular paths, each in place of ``maxBodyBytes`` for requests
    /// to its path: a route that takes larger bodies than the rest. The limit is known
    /// once the head is read, so a body is refused before it is buffered. Default none.
    public var pathBodyLimits: [PathBodyLimit]
    /// The most body bytes the server holds at once over all its connections (a
    /// ``BodyBudget``): bodies being received and bodies whose answer is not written yet.
    /// A request whose body would go over it is answered `503 unavailable` with
    /// `Retry-After: 1` before its body is read, and its connection closes. At least
    /// ``maxBodyBytes`` and every path's limit, or such a body could never be taken.
    /// Default 64 MiB.
    public var maxBufferedBodyBytes: Int

    /// Creates limits; every argument defaults to PROTOCOL.md's figure.
    public init(
        maxBodyBytes: Int = 1 << 20, maxHeaderBytes: Int = 16 << 10, maxHeaderFields: Int = 100,
        maxURLBytes: Int = 8 << 10, maxPipelinedRequests: Int = 16, maxUnsentBytes: Int = 256 << 10,
        pathBodyLimits: [PathBodyLimit] = [], maxBufferedBodyBytes: Int = 64 << 20
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
        precondition(pathBodyLimits.allSatisfy { $0.maxBytes >= 0 }, "limits must be positive")
        self.pathBodyLimits = pathBodyLimits
        precondition(maxBufferedBodyBytes >= 0, "limits must be positive")
        self.maxBufferedBodyBytes = maxBufferedBodyBytes
    }

    /// The path limit for the request target `target` (the path and any query, as
    /// sent), or nil when ``maxBodyBytes`` applies.
    func pathBodyLimit(forTarget target: [UInt8]) -> PathBodyLimit? {
        guard !pathBodyLimits.isEmpty else { return nil }
        let end =
            target.firstIndex { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") } ?? target.endIndex
        let segments = target[..<end].split(separator: UInt8(ascii: "/"))
        return pathBodyLimits.first { limit in
            limit.path.utf8.split(separator: UInt8(ascii: "/")).elementsEqual(segments) { $0.elementsEqual($1) }
        }
    }
}

/// A body limit for the requests to one path (``HTTPLimits/pathBodyLimits``).
public struct PathBodyLimit: Sendable, Equatable {
    /// The path, matched as ``Router`` matches a pattern of literal segments: segment by
    /// segment, bytes as sent, empty segments ignored (`/v1/big/` is `/v1/big`).
    public var path: String
    /// The largest body accepted on this path (`413 payload_too_large` above it).
    public var maxBytes: Int
    /// The `413`'s message, e.g. naming the setting that raises the limit.
    public var message: String

    /// A limit of `maxBytes` for `path`, refused with `message`.
    public init(path: String, maxBytes: Int, message: String) {
        self.path = path
        self.maxBytes = maxBytes
        self.message = message
    }
}
