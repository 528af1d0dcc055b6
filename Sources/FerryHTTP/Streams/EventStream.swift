import FerryLoop

/// How an ``EventStream`` reaches its client.
public enum EventStreamTransport: String, Sendable, CaseIterable {
    /// RFC 6455 WebSocket (`GET /v1/stream`).
    case webSocket = "websocket"
    /// Server-Sent Events (`GET /v1/events`).
    case serverSentEvents = "sse"
}

/// A long-lived server-to-client message stream taken over from an HTTP connection
/// (``HTTPResponder/takeOver(_:)``): a WebSocket or a Server-Sent Events response.
/// Loop thread only.
///
/// The application sees one shape for both transports: it sends typed JSON messages,
/// heartbeats and a final close; WebSocket clients may also send text messages back.
/// An idle stream holds no read buffer and no timer of its own: the owner drives
/// heartbeats from one timer per loop.
public protocol EventStream: AnyObject {
    /// The transport this stream speaks.
    var transport: EventStreamTransport { get }
    /// Bytes handed to the socket that the kernel has not taken yet.
    var unsentBytes: Int { get }
    /// Whether the stream still accepts messages (not closing or closed).
    var isOpen: Bool { get }

    /// Sends one message: a WebSocket text frame holding `json`, or an SSE event
    /// `event: <type>` / `data: <json>`. `json` is one line of UTF-8 JSON.
    /// Dropped once the stream is closing.
    func send(type: String, json: [UInt8])

    /// Sends a heartbeat: a WebSocket ping, or an SSE `: ping` comment.
    ///
    /// Returns false when the peer is known dead: on a WebSocket, no pong arrived
    /// since the previous ping. The owner then closes the stream.
    func heartbeat() -> Bool

    /// Closes the stream: on a WebSocket a close frame with `code` and `reason`,
    /// then the close handshake (bounded in time); on SSE a last `event: closed`
    /// with `data: {"code":…,"reason":…}`, then the connection closes once it is
    /// written. ``onClose`` follows once the socket is gone.
    func close(code: UInt16, reason: String)

    /// Called with each complete text message the client sends (WebSocket only),
    /// valid only during the call.
    var onMessage: ((UnsafeRawBufferPointer) -> Void)? { get set }
    /// Called when every byte handed to the stream has been taken by the kernel
    /// after some had to wait, so a coalesced message can be sent now.
    var onWritable: (() -> Void)? { get set }
    /// Called exactly once, when the stream is gone for any reason (either side,
    /// a protocol error, a dead socket). The stream is released afterwards.
    var onClose: (() -> Void)? { get set }
}

extension EventStream {
    /// The end of a stream type's `connectionDidClose`: lets go of every callback (they
    /// may hold the stream's owner) and calls ``onClose``, once.
    func reportClosed() {
        let onClose = self.onClose
        self.onClose = nil
        onMessage = nil
        onWritable = nil
        onClose?()
    }
}
