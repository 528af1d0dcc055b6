import CWslay
import FerryLoop

/// An RFC 6455 WebSocket as an ``EventStream``, on wslay's event API. Loop thread only.
///
/// Per idle stream it holds this object, the ``TCPConnection`` and wslay's context
/// (about 8.8 KiB, which keeps a partial frame's bytes between reads): no read buffer of
/// its own (wslay's receive callback copies from the loop's shared read buffer, during
/// the read) and no timer while open (the owner drives ``heartbeat()``). wslay copies an
/// outgoing message until it is framed, which happens at once: the send callback hands
/// every byte to the connection, which queues only what the kernel does not take.
///
/// wslay enforces the protocol: an unmasked client frame closes with 1002, a message
/// over the size limit with 1009, a text message that is not UTF-8 with 1007; pings are
/// answered with pongs and a peer's close frame is answered with one. The stream adds
/// 1003 for binary messages, and 1002 for a one-byte close body and for the frames
/// wslay's parser refuses without a code (a control frame fragmented or over 125
/// bytes). The connection closes once close frames went both ways, after a protocol
/// error, or ``closeTimeoutMilliseconds`` after our close frame if the peer never
/// answers. The connection keeps the stream alive (it is the delegate) until
/// it closes.
public final class WebSocketStream: EventStream, TCPConnectionDelegate {
    /// The connection the stream speaks on.
    public let tcp: TCPConnection
    /// How long the peer has to answer our close frame before the connection closes.
    public let closeTimeoutMilliseconds: UInt64
    private var context: wslay_event_context_ptr?
    /// The bytes of the read being handed to wslay; empty between reads.
    private var input = UnsafeRawBufferPointer(start: nil, count: 0)
    private var isReceiving = false
    /// A frame header (at most 14 bytes) wslay sent ahead of its payload, held back so
    /// the header and the payload leave in one write.
    private var heldHeader: (UInt64, UInt64) = (0, 0)
    private var heldHeaderCount = 0
    private var awaitingPong = false
    /// We queued a close frame (``close(code:reason:)`` or a protocol error).
    private var closeQueuedByUs = false
    /// The connection was asked to close (after its writes).
    private var isClosingConnection = false
    private var closeTimer: Timer?

    public var onMessage: ((UnsafeRawBufferPointer) -> Void)?
    public var onWritable: (() -> Void)?
    public var onClose: (() -> Void)?

    public var transport: EventStreamTransport { .webSocket }
    public var unsentBytes: Int { tcp.unsentBytes + heldHeaderCount }
    public var isOpen: Bool {
        guard let context, tcp.isOpen, !closeQueuedByUs, !isClosingConnection else { return false }
        return wslay_event_get_close_received(context) == 0 && wslay_event_get_write_enabled(context) != 0
    }

    private init(tcp: TCPConnection, closeTimeoutMilliseconds: UInt64) {
        self.tcp = tcp
        self.closeTimeoutMilliseconds = closeTimeoutMilliseconds
    }

    /// Completes the handshake on a connection that ``HTTPResponder/takeOver(_:)`` handed
    /// over: writes the `101` answer, becomes the connection's delegate and starts
    /// reading. Client messages over `maxMessageBytes` close the stream with 1009.
    ///
    /// `bufferedBytes` (frames a client sent before the `101`, which RFC 6455 forbids but
    /// a client may do anyway) are read on the loop's next turn, so set the callbacks
    /// before returning to the loop.
    public static func open(
        tcp: TCPConnection, bufferedBytes: [UInt8], handshake: WebSocketHandshake, maxMessageBytes: Int,
        closeTimeoutMilliseconds: UInt64 = 2_000
    ) -> WebSocketStream {
        tcp.loop.preconditionInEventLoop()
        let stream = WebSocketStream(tcp: tcp, closeTimeoutMilliseconds: closeTimeoutMilliseconds)
        var callbacks = wslay_event_callbacks(
            recv_callback: { context, buffer, length, _, userData in
                WebSocketStream.from(userData).receive(into: buffer!, length: length, context: context)
            },
            send_callback: { _, data, length, flags, userData in
                WebSocketStream.from(userData).transmit(
                    UnsafeRawBufferPointer(start: data, count: length), flags: flags)
            },
            genmask_callback: nil,
            on_frame_recv_start_callback: { _, argument, userData in
                WebSocketStream.from(userData).frameStarted(
                    opcode: argument!.pointee.opcode, payloadLength: argument!.pointee.payload_length)
            },
            on_frame_recv_chunk_callback: nil,
            on_frame_recv_end_callback: nil,
            on_msg_recv_callback: { _, argument, userData in
                let message = argument!.pointee
                WebSocketStream.from(userData).received(
                    opcode: message.opcode, UnsafeRawBufferPointer(start: message.msg, count: message.msg_length))
            })
        var context: wslay_event_context_ptr?
        let status = wslay_event_context_server_init(
            &context, &callbacks, Unmanaged.passUnretained(stream).toOpaque())
        tcp.delegate = stream
        guard status == 0, let context else {
            // Out of memory: refuse with what HTTP still allows, then let go.
            tcp.write("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            tcp.closeAfterWrites()
            return stream
        }
        stream.context = context
        wslay_event_config_set_max_recv_msg_length(context, UInt64(max(maxMessageBytes, 0)))
        tcp.write(handshake.responseHead)
        if bufferedBytes.isEmpty {
            tcp.startReading()
        } else {
            tcp.loop.schedule(after: 0) { [weak stream] in
                guard let stream else { return }
                bufferedBytes.withUnsafeBytes { stream.connection(tcp, didRead: $0) }
                if stream.context != nil && !stream.isClosingConnection { tcp.startReading() }
            }
        }
        return stream
    }

    private static func from(_ userData: UnsafeMutableRawPointer?) -> WebSocketStream {
        Unmanaged<WebSocketStream>.fromOpaque(userData!).takeUnretainedValue()
    }

    // MARK: - EventStream

    /// Sends `json` as one text frame; dropped once the stream is closing.
    public func send(type: String, json: [UInt8]) {
        guard isOpen, let context else { return }
        let status = json.withUnsafeBufferPointer { bytes in
            var message = wslay_event_msg(
                opcode: UInt8(WSLAY_TEXT_FRAME.rawValue), msg: bytes.baseAddress, msg_length: bytes.count)
            return wslay_event_queue_msg(context, &message)
        }
        guard status == 0 else { return }
        flush()
    }

    /// Sends a ping; false when no pong arrived since the previous one (the owner then
    /// closes the stream) or the stream is closing.
    public func heartbeat() -> Bool {
        guard isOpen, let context, !awaitingPong else { return false }
        var message = wslay_event_msg(opcode: UInt8(WSLAY_PING.rawValue), msg: nil, msg_length: 0)
        guard wslay_event_queue_msg(context, &message) == 0 else { return false }
        awaitingPong = true
        flush()
        return true
    }

    /// Sends a close frame with `code` and `reason` (cut to the 123 bytes a control frame
    /// allows); the connection closes when the peer's close frame arrives, or
    /// ``closeTimeoutMilliseconds`` later.
    public func close(code: UInt16, reason: String) {
        guard isOpen, let context else { return }
        closeQueuedByUs = true
        // A control frame holds 125 bytes: the code and at most 123 of whole characters.
        var reasonBytes: [UInt8] = []
        for character in reason {
            guard reasonBytes.count + character.utf8.count <= 123 else { break }
            reasonBytes.append(contentsOf: character.utf8)
        }
        let status = reasonBytes.withUnsafeBufferPointer {
            wslay_event_queue_close(context, code, $0.baseAddress, $0.count)
        }
        guard status == 0 else {
            tcp.close()
            return
        }
        flush()
        guard !isClosingConnection, tcp.isOpen else { return }
        closeTimer = tcp.loop.schedule(after: closeTimeoutMilliseconds) { [weak self] in
            self?.closeTimer = nil
            self?.tcp.close()
        }
    }

    // MARK: - wslay callbacks

    /// wslay wants bytes: hand over what is left of the current read.
    private func receive(
        into buffer: UnsafeMutablePointer<UInt8>, length: Int, context: wslay_event_context_ptr?
    ) -> Int {
        guard !input.isEmpty else {
            wslay_event_set_error(context, WSLAY_ERR_WOULDBLOCK.rawValue)
            return -1
        }
        let count = min(length, input.count)
        UnsafeMutableRawPointer(buffer).copyMemory(from: input.baseAddress!, byteCount: count)
        input = UnsafeRawBufferPointer(rebasing: input[count...])
        return count
    }

    /// wslay has bytes to send: the connection takes them all (queueing what the kernel
    /// does not), except a header with more to follow, held for the payload's write.
    private func transmit(_ bytes: UnsafeRawBufferPointer, flags: Int32) -> Int {
        let more = flags & Int32(WSLAY_MSG_MORE.rawValue) != 0
        if more && heldHeaderCount == 0 && bytes.count <= MemoryLayout.size(ofValue: heldHeader) {
            withUnsafeMutableBytes(of: &heldHeader) { $0.copyMemory(from: bytes) }
            heldHeaderCount = bytes.count
            return bytes.count
        }
        guard heldHeaderCount > 0 else {
            tcp.write(bytes)
            return bytes.count
        }
        let headerCount = heldHeaderCount
        heldHeaderCount = 0
        let header = heldHeader
        withUnsafeTemporaryAllocation(byteCount: headerCount + bytes.count, alignment: 1) { frame in
            withUnsafeBytes(of: header) { frame.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: headerCount) }
            if let base = bytes.baseAddress {
                (frame.baseAddress! + headerCount).copyMemory(from: base, byteCount: bytes.count)
            }
            tcp.write(UnsafeRawBufferPointer(frame))
        }
        return bytes.count
    }

    private func frameStarted(opcode: UInt8, payloadLength: UInt64) {
        if opcode == UInt8(WSLAY_BINARY_FRAME.rawValue) {
            // Ferry's messages are JSON text; refuse before buffering a binary message.
            fail(code: UInt16(WSLAY_CODE_UNSUPPORTED_DATA.rawValue))
        } else if opcode == UInt8(WSLAY_CONNECTION_CLOSE.rawValue) && payloadLength == 1 {
            // A close body is a two-byte code (and a reason) or nothing; wslay would take
            // one byte as "no code" and answer without one.
            fail(code: UInt16(WSLAY_CODE_PROTOCOL_ERROR.rawValue))
        }
    }

    private func received(opcode: UInt8, _ message: UnsafeRawBufferPointer) {
        switch opcode {
        case UInt8(WSLAY_TEXT_FRAME.rawValue):
            // wslay has checked the UTF-8 of the whole message.
            if isOpen { onMessage?(message) }
        case UInt8(WSLAY_PONG.rawValue):
            awaitingPong = false
        default:
            // Pings and close frames are answered by wslay; binary ones were refused.
            break
        }
    }

    /// Queues a close frame and stops reading: a protocol error ends the stream at once.
    private func fail(code: UInt16) {
        guard let context else { return }
        wslay_event_shutdown_read(context)
        closeQueuedByUs = true
        _ = wslay_event_queue_close(context, code, nil, 0)
    }

    // MARK: - Driving wslay

    /// Hands wslay's queued frames to the connection, then closes the connection once
    /// wslay will neither read nor write again. Deferred while wslay is reading (a
    /// callback may send); the read flushes when it is done.
    private func flush() {
        guard let context, !isReceiving, !isClosingConnection else { return }
        if wslay_event_send(context) != 0 {
            tcp.close()
            return
        }
        if heldHeaderCount > 0 {
            let header = heldHeader
            let count = heldHeaderCount
            heldHeaderCount = 0
            withUnsafeBytes(of: header) { tcp.write(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
        }
        if wslay_event_want_read(context) == 0 && wslay_event_want_write(context) == 0 {
            isClosingConnection = true
            closeTimer?.close()
            closeTimer = nil
            tcp.closeAfterWrites()
        }
    }

    // MARK: - TCPConnectionDelegate

    public func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        guard let context, !isClosingConnection else { return }
        input = bytes
        isReceiving = true
        let status = wslay_event_recv(context)
        isReceiving = false
        input = UnsafeRawBufferPointer(start: nil, count: 0)
        if status == WSLAY_ERR_CALLBACK_FAILURE.rawValue {
            return failFraming()
        }
        guard status == 0 else {
            tcp.close()
            return
        }
        flush()
    }

    /// A close frame with 1002 (protocol error) and no reason, as a server sends it.
    private static let protocolErrorClose: [UInt8] = [0x88, 0x02, 0x03, 0xEA]

    /// wslay's frame parser refused a frame header: a control frame over 125 bytes or
    /// fragmented, or a payload length not in its shortest form. wslay reports that as a
    /// callback failure (our callbacks never fail otherwise) and queues a close frame
    /// without a code, where RFC 6455 wants 1002; so the close frame is written here,
    /// frames wslay still holds are dropped, and the connection closes after it.
    private func failFraming() {
        guard let context, wslay_event_get_close_sent(context) == 0 else {
            tcp.close()
            return
        }
        closeQueuedByUs = true
        isClosingConnection = true
        closeTimer?.close()
        closeTimer = nil
        tcp.write(Self.protocolErrorClose)
        tcp.closeAfterWrites()
    }

    public func connectionDidReachEnd(_ connection: TCPConnection) {
        // The peer hung up (with or without a close frame): nobody reads what is unsent.
        connection.close()
    }

    public func connectionDidDrain(_ connection: TCPConnection) {}

    public func connectionDidFlush(_ connection: TCPConnection) {
        guard isOpen else { return }
        onWritable?()
    }

    public func connectionDidClose(_ connection: TCPConnection, error: LoopError?) {
        closeTimer?.close()
        closeTimer = nil
        if let context {
            wslay_event_context_free(context)
            self.context = nil
        }
        reportClosed()
    }
}
