import CWslay
import FerryLoop

/// An RFC 6455 WebSocket as an ``EventStream``, on wslay's event API. Loop thread only.
///
/// Per idle stream it holds this object and the ``TCPConnection``: no read buffer of its
/// own (wslay's receive callback copies from the loop's shared read buffer, during the
/// read), no timer while open (the owner drives ``heartbeat()``) and no wslay context.
/// wslay's event context (about 8.8 KiB: a 4 KiB input buffer, a 4 KiB output buffer and
/// its queues) is made when bytes arrive or a frame must be sent, and freed again once
/// the stream is idle: every byte handed to wslay belongs to a frame it has finished (no
/// partial header or payload in its buffer), no fragmented message is half received,
/// nothing is queued to send, and no close frame went either way. wslay keeps no other
/// state between messages (its UTF-8 check and message buffer are per message), so a
/// fresh context parses the next frame exactly as the old one would have. wslay copies an
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
    /// wslay's context while a frame or message is in flight (see the type's comment).
    private var context: wslay_event_context_ptr?
    private let maxMessageBytes: Int
    /// Bytes handed to wslay's context since it was made, and the bytes of the frames it
    /// has finished parsing (header and payload): equal when it holds no partial frame.
    private var bytesToWslay: UInt64 = 0
    private var bytesOfFinishedFrames: UInt64 = 0
    /// The size (header and payload) of the frame wslay is parsing.
    private var currentFrameBytes: UInt64 = 0
    /// A data message has started (its first frame arrived) and not yet ended.
    private var isMessageInFlight = false
    /// Making wslay's context failed (out of memory): the connection is closing.
    private var contextFailed = false
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
        guard tcp.isOpen, !contextFailed, !closeQueuedByUs, !isClosingConnection else { return false }
        // Without a context no close frame went either way (it is freed only when idle).
        guard let context else { return true }
        return wslay_event_get_close_received(context) == 0 && wslay_event_get_write_enabled(context) != 0
    }

    /// Whether the stream holds wslay's context now: while a frame or message is in
    /// flight or the stream is closing, not while it is idle. For tests and diagnostics.
    public var holdsFramingContext: Bool { context != nil }

    private init(tcp: TCPConnection, closeTimeoutMilliseconds: UInt64, maxMessageBytes: Int) {
        self.tcp = tcp
        self.closeTimeoutMilliseconds = closeTimeoutMilliseconds
        self.maxMessageBytes = max(maxMessageBytes, 0)
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
        let stream = WebSocketStream(
            tcp: tcp, closeTimeoutMilliseconds: closeTimeoutMilliseconds, maxMessageBytes: maxMessageBytes)
        tcp.delegate = stream
        tcp.write(handshake.responseHead)
        if bufferedBytes.isEmpty {
            tcp.startReading()
        } else {
            tcp.loop.schedule(after: 0) { [weak stream] in
                guard let stream else { return }
                bufferedBytes.withUnsafeBytes { stream.connection(tcp, didRead: $0) }
                if tcp.isOpen && !stream.isClosingConnection { tcp.startReading() }
            }
        }
        return stream
    }

    private static func from(_ userData: UnsafeMutableRawPointer?) -> WebSocketStream {
        Unmanaged<WebSocketStream>.fromOpaque(userData!).takeUnretainedValue()
    }

    /// wslay's context, made now if the stream is idle; nil (and the connection closing)
    /// when it cannot be made.
    private func framingContext() -> wslay_event_context_ptr? {
        if let context { return context }
        guard !contextFailed else { return nil }
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
                let frame = argument!.pointee
                WebSocketStream.from(userData).frameStarted(
                    opcode: frame.opcode, final: frame.fin != 0, payloadLength: frame.payload_length)
            },
            on_frame_recv_chunk_callback: nil,
            on_frame_recv_end_callback: { _, userData in
                WebSocketStream.from(userData).frameEnded()
            },
            on_msg_recv_callback: { _, argument, userData in
                let message = argument!.pointee
                WebSocketStream.from(userData).received(
                    opcode: message.opcode, UnsafeRawBufferPointer(start: message.msg, count: message.msg_length))
            })
        var made: wslay_event_context_ptr?
        let status = wslay_event_context_server_init(&made, &callbacks, Unmanaged.passUnretained(self).toOpaque())
        guard status == 0, let made else {
            // Out of memory: no frame can be parsed or sent; let go of the connection.
            contextFailed = true
            tcp.close()
            return nil
        }
        wslay_event_config_set_max_recv_msg_length(made, UInt64(maxMessageBytes))
        context = made
        bytesToWslay = 0
        bytesOfFinishedFrames = 0
        currentFrameBytes = 0
        return made
    }

    /// Frees wslay's context if the stream is idle (see the type's comment).
    private func releaseContextIfIdle() {
        guard let context, !isReceiving, isOpen, heldHeaderCount == 0, !isMessageInFlight,
            bytesToWslay == bytesOfFinishedFrames, wslay_event_get_queued_msg_count(context) == 0,
            wslay_event_want_write(context) == 0, wslay_event_get_read_enabled(context) != 0,
            wslay_event_get_close_sent(context) == 0
        else { return }
        wslay_event_context_free(context)
        self.context = nil
    }

    // MARK: - EventStream

    /// Sends `json` as one text frame; dropped once the stream is closing.
    public func send(type: String, json: [UInt8]) {
        guard isOpen, let context = framingContext() else { return }
        let status = json.withUnsafeBufferPointer { bytes in
            var message = wslay_event_msg(
                opcode: UInt8(WSLAY_TEXT_FRAME.rawValue), msg: bytes.baseAddress, msg_length: bytes.count)
            return wslay_event_queue_msg(context, &message)
        }
        guard status == 0 else { return releaseContextIfIdle() }
        flush()
    }

    /// Sends a ping; false when no pong arrived since the previous one (the owner then
    /// closes the stream) or the stream is closing.
    public func heartbeat() -> Bool {
        guard isOpen, !awaitingPong, let context = framingContext() else { return false }
        var message = wslay_event_msg(opcode: UInt8(WSLAY_PING.rawValue), msg: nil, msg_length: 0)
        guard wslay_event_queue_msg(context, &message) == 0 else {
            releaseContextIfIdle()
            return false
        }
        awaitingPong = true
        flush()
        return true
    }

    /// Sends a close frame with `code` and `reason` (cut to the 123 bytes a control frame
    /// allows); the connection closes when the peer's close frame arrives, or
    /// ``closeTimeoutMilliseconds`` later.
    public func close(code: UInt16, reason: String) {
        guard isOpen, let context = framingContext() else { return }
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
        bytesToWslay &+= UInt64(count)
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

    /// wslay has parsed a frame's header; it calls this only for a masked frame whose
    /// length is in its shortest form and within the message limit.
    private func frameStarted(opcode: UInt8, final: Bool, payloadLength: UInt64) {
        // A client frame's header: 2 bytes, the extended length, the 4-byte mask key.
        let lengthBytes: UInt64 = payloadLength < 126 ? 0 : payloadLength <= 0xFFFF ? 2 : 8
        currentFrameBytes = 2 &+ lengthBytes &+ 4 &+ payloadLength
        if opcode == UInt8(WSLAY_TEXT_FRAME.rawValue) || opcode == UInt8(WSLAY_CONTINUATION_FRAME.rawValue) {
            isMessageInFlight = !final
        }
        if opcode == UInt8(WSLAY_BINARY_FRAME.rawValue) {
            // Ferry's messages are JSON text; refuse before buffering a binary message.
            fail(code: UInt16(WSLAY_CODE_UNSUPPORTED_DATA.rawValue))
        } else if opcode == UInt8(WSLAY_CONNECTION_CLOSE.rawValue) && payloadLength == 1 {
            // A close body is a two-byte code (and a reason) or nothing; wslay would take
            // one byte as "no code" and answer without one.
            fail(code: UInt16(WSLAY_CODE_PROTOCOL_ERROR.rawValue))
        }
    }

    /// wslay has the whole of the frame whose header ``frameStarted`` saw.
    private func frameEnded() {
        bytesOfFinishedFrames &+= currentFrameBytes
        currentFrameBytes = 0
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
            return
        }
        releaseContextIfIdle()
    }

    // MARK: - TCPConnectionDelegate

    public func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        guard !isClosingConnection, let context = framingContext() else { return }
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
