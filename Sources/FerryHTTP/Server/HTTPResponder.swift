import FerryLoop

/// The way a handler answers one request.
///
/// Call ``respond(_:)`` exactly once, on the connection's loop (``loop``), now or later
/// (for example from a database callback on that loop). A responder that is never used
/// stalls its connection until it closes, so every path of a handler must answer.
/// Answering after the client went away is harmless: the response is dropped.
/// Not `Sendable`: to answer from another thread, hop to ``loop`` with `execute` first.
public struct HTTPResponder {
    let connection: HTTPConnection
    let sequence: UInt64
    /// The pattern of the route being answered (for the handler's own logs), nil if none.
    public let route: String?
    /// The request's `Origin` when the server's ``CORSPolicy`` allows it: the answer then
    /// carries the CORS headers, and so must a head the route writes itself after
    /// ``takeOver(_:)`` (``ServerSentEventStream/open(tcp:bufferedBytes:retryMilliseconds:corsOrigin:)``).
    public let corsOrigin: String?

    /// The loop that owns the connection; ``respond(_:)`` must run on it.
    public var loop: EventLoop { connection.loop }

    /// Sends `response` once every earlier request of the connection is answered.
    ///
    /// Traps when called twice or off the loop.
    public func respond(_ response: HTTPResponse) {
        var response = response
        if let corsOrigin { CORSPolicy.decorate(&response, origin: corsOrigin) }
        connection.respond(sequence: sequence, response: response, route: route)
    }

    /// Hands the TCP connection to another protocol instead of answering (the seam for
    /// WebSocket and Server-Sent Events).
    ///
    /// Allowed only when this request is the connection's only one in flight and nothing
    /// of a later request has been read. Then every earlier response has been written,
    /// the HTTP layer lets go of the socket (no timers, no shutdown handling, reading
    /// paused) and `body` gets it with the bytes already read after this request (the
    /// new protocol's first bytes); `body` sets the delegate and starts reading. When not
    /// allowed, the request is answered `400 invalid_request` and false is returned.
    @discardableResult
    public func takeOver(_ body: (TCPConnection, _ bufferedBytes: [UInt8]) -> Void) -> Bool {
        connection.takeOver(sequence: sequence, route: route, body)
    }
}
