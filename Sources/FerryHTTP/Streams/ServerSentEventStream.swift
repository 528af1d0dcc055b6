import FerryJSON
import FerryLoop

/// A Server-Sent Events response (`text/event-stream`) as an ``EventStream``.
/// Loop thread only.
///
/// Per stream it holds this object and the ``TCPConnection``, nothing else: events are
/// framed in a temporary buffer and handed to the socket at once (only what the
/// kernel does not take is queued). It keeps reading, into the loop's shared buffer,
/// only to notice a client that goes away; what the client sends is ignored.
/// The connection keeps the stream alive (it is the delegate) until it closes.
public final class ServerSentEventStream: EventStream, TCPConnectionDelegate {
    /// The connection the stream writes to.
    public let tcp: TCPConnection
    private var isClosing = false
    private var isClosed = false

    public var onMessage: ((UnsafeRawBufferPointer) -> Void)?
    public var onWritable: (() -> Void)?
    public var onClose: (() -> Void)?

    public var transport: EventStreamTransport { .serverSentEvents }
    public var unsentBytes: Int { tcp.unsentBytes }
    public var isOpen: Bool { !isClosing && !isClosed && tcp.isOpen }

    private init(tcp: TCPConnection) {
        self.tcp = tcp
    }

    /// Starts an event stream on a connection that ``HTTPResponder/takeOver(_:)`` handed
    /// over: writes the `200` head and a `retry: <retryMilliseconds>` hint, becomes the
    /// connection's delegate and starts reading. `bufferedBytes` (whatever the client
    /// sent after its request) are ignored. `corsOrigin`, an origin the server's
    /// ``CORSPolicy`` allows (``HTTPResponder/corsOrigin``), gets the CORS headers every
    /// other answer to it carries, so a page on that origin can read the stream.
    ///
    /// Set the callbacks before returning to the loop; they are not called before.
    public static func open(
        tcp: TCPConnection, bufferedBytes: [UInt8], retryMilliseconds: Int = 3_000, corsOrigin: String? = nil
    ) -> ServerSentEventStream {
        tcp.loop.preconditionInEventLoop()
        let stream = ServerSentEventStream(tcp: tcp)
        tcp.write(head(retryMilliseconds: retryMilliseconds, corsOrigin: corsOrigin))
        tcp.delegate = stream
        tcp.startReading()
        return stream
    }

    /// The response head and the `retry:` hint.
    ///
    /// The body is delimited by the connection's close, not chunked: an event stream
    /// ends only when its connection does, so the close is its natural end; every event
    /// goes out as it is, without a chunk-size line around it; and every HTTP/1.x client
    /// (EventSource, curl, httpx) reads a close-delimited body. `Connection: close` tells
    /// proxies the connection is not reused.
    static func head(retryMilliseconds: Int, corsOrigin: String? = nil) -> [UInt8] {
        var head: [UInt8] = []
        head.reserveCapacity(256)
        head.append(contentsOf: "HTTP/1.1 200 OK\r\nDate: ".utf8)
        HTTPDate().append(to: &head, now: MonotonicClock.now())
        head.append(
            contentsOf:
                "\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nX-Accel-Buffering: no\r\nConnection: close\r\n"
                .utf8)
        if let corsOrigin { head.append(contentsOf: CORSPolicy.headLines(origin: corsOrigin).utf8) }
        head.append(contentsOf: "\r\n".utf8)
        head.append(contentsOf: "retry: \(max(retryMilliseconds, 0))\n\n".utf8)
        return head
    }

    // MARK: - EventStream

    /// Writes `event: <type>`, `data: <json>` and the blank line that ends an event.
    /// `type` and `json` hold no line break (JSON escapes its own).
    public func send(type: String, json: [UInt8]) {
        guard isOpen else { return }
        var type = type
        type.withUTF8 { typeBytes in
            json.withUnsafeBytes { jsonBytes in
                writeEvent(type: UnsafeRawBufferPointer(typeBytes), data: jsonBytes)
            }
        }
    }

    /// Writes a `: ping` comment; true while the connection is open (a dead client shows
    /// up as a read error or end of stream, or as ``unsentBytes`` that never shrink).
    public func heartbeat() -> Bool {
        guard isOpen else { return false }
        tcp.write(ServerSentEventStream.ping)
        return tcp.isOpen
    }

    /// Writes `event: closed` with `data: {"code":…,"reason":…}`, then closes the
    /// connection once that is written.
    public func close(code: UInt16, reason: String) {
        guard isOpen else { return }
        var data: [UInt8] = []
        data.reserveCapacity(32 + reason.utf8.count)
        data.append(contentsOf: #"{"code":"#.utf8)
        data.append(contentsOf: String(code).utf8)
        data.append(contentsOf: #","reason":"#.utf8)
        JSONString.append(reason, to: &data)
        data.append(UInt8(ascii: "}"))
        let type = ServerSentEventStream.closedType
        data.withUnsafeBytes {
            writeEvent(type: UnsafeRawBufferPointer(start: type.utf8Start, count: type.utf8CodeUnitCount), data: $0)
        }
        isClosing = true
        tcp.closeAfterWrites()
    }

    private static let ping: [UInt8] = Array(": ping\n\n".utf8)
    private static let closedType: StaticString = "closed"

    private func writeEvent(type: UnsafeRawBufferPointer, data: UnsafeRawBufferPointer) {
        let eventPrefix = "event: ".utf8
        let dataPrefix = "\ndata: ".utf8
        let count = eventPrefix.count + type.count + dataPrefix.count + data.count + 2
        // One write per event; the frame lives on the stack for the usual small event.
        withUnsafeTemporaryAllocation(byteCount: count, alignment: 1) { frame in
            var offset = 0
            func append(_ bytes: some Collection<UInt8>) {
                for byte in bytes {
                    frame[offset] = byte
                    offset += 1
                }
            }
            func append(_ bytes: UnsafeRawBufferPointer) {
                guard let base = bytes.baseAddress, bytes.count > 0 else { return }
                (frame.baseAddress! + offset).copyMemory(from: base, byteCount: bytes.count)
                offset += bytes.count
            }
            append(eventPrefix)
            append(type)
            append(dataPrefix)
            append(data)
            append("\n\n".utf8)
            tcp.write(UnsafeRawBufferPointer(frame))
        }
    }

    // MARK: - TCPConnectionDelegate

    public func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {}

    public func connectionDidReachEnd(_ connection: TCPConnection) {
        // The client went away: nobody is left to read what is unsent.
        connection.close()
    }

    public func connectionDidDrain(_ connection: TCPConnection) {}

    public func connectionDidFlush(_ connection: TCPConnection) {
        guard isOpen else { return }
        onWritable?()
    }

    public func connectionDidClose(_ connection: TCPConnection, error: LoopError?) {
        isClosed = true
        reportClosed()
    }
}
