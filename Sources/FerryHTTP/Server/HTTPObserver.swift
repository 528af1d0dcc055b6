/// Receives what the server did, for metrics and access logs.
///
/// Each loop gets its own observer from the factory given to ``HTTPServer``, and calls
/// it on that loop's thread only, so an observer may keep plain counters without locks.
/// Calls sit on the request path: keep them cheap (no I/O; hand log lines to a queue).
public protocol HTTPObserver: AnyObject {
    /// A connection was accepted. `remoteAddress` is the TCP peer's `ip:port` (a trusted
    /// proxy's, whose PROXY header is still to come), or nil if unknown.
    func connectionOpened(remoteAddress: String?)
    /// A response was handed to the socket.
    func responseSent(_ record: HTTPResponseRecord)
    /// A connection closed (from either side), or a handler took it over for another protocol.
    func connectionClosed(remoteAddress: String?)
}

extension HTTPObserver {
    /// Does nothing.
    public func connectionOpened(remoteAddress: String?) {}
    /// Does nothing.
    public func responseSent(_ record: HTTPResponseRecord) {}
    /// Does nothing.
    public func connectionClosed(remoteAddress: String?) {}
}

/// One answered request, as the observer sees it.
public struct HTTPResponseRecord: Sendable {
    /// The request method, or nil when the request could not be parsed.
    public var method: HTTPMethod?
    /// The matched route's pattern (`/v1/locks/:table/:key/claim`), or nil when no route
    /// matched (404, 405) or the request was refused before routing (400, 413, …).
    public var route: String?
    /// The response status.
    public var status: HTTPStatus
    /// From the request being fully received to its response being written, in nanoseconds.
    public var durationNanoseconds: UInt64
    /// Bytes of the response on the wire, head and body.
    public var responseBytes: Int
    /// Who sent the request (``HTTPRequest/remoteAddress``), or nil if unknown.
    public var remoteAddress: ClientAddress?
}
