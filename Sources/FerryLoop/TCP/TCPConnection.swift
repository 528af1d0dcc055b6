import CLibUV

#if canImport(Glibc)
    import Glibc
#endif

/// What a ``TCPConnection`` tells its owner. All calls arrive on the connection's loop.
public protocol TCPConnectionDelegate: AnyObject {
    /// Bytes arrived. They are valid only during the call (the loop reuses the buffer).
    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer)
    /// The peer will send nothing more (it half-closed or hung up). Writes may still work.
    func connectionDidReachEnd(_ connection: TCPConnection)
    /// Unsent bytes fell back under the low-water mark after reading was paused for them.
    func connectionDidDrain(_ connection: TCPConnection)
    /// Every byte that had to wait in the write queue is written: nothing is unsent.
    /// Not called for writes the kernel took at once.
    func connectionDidFlush(_ connection: TCPConnection)
    /// The connection is closed; `error` is nil for a close this side asked for. Called once.
    func connectionDidClose(_ connection: TCPConnection, error: LoopError?)
}

extension TCPConnectionDelegate {
    /// Does nothing: most owners only care about ``connectionDidDrain(_:)``.
    public func connectionDidFlush(_ connection: TCPConnection) {}
}

/// A TCP stream on one loop with an owned write queue and backpressure. Loop thread only.
///
/// Writes are tried at once (`uv_try_write`), so a response to an idle socket costs
/// no allocation; whatever the kernel does not take is copied and queued. While the
/// unsent bytes exceed ``highWaterMark`` the connection stops reading, so a client
/// that does not read its answers cannot make the server buffer without bound.
public final class TCPConnection {
    /// The loop that owns this connection.
    public let loop: EventLoop
    /// Receives reads and lifecycle events; released when the connection closes.
    public var delegate: TCPConnectionDelegate?
    /// Above this many unsent bytes the connection stops reading.
    public var highWaterMark = 256 * 1024
    /// Reading resumes once unsent bytes fall to this many.
    public var lowWaterMark = 64 * 1024

    private let handle: UnsafeMutablePointer<uv_tcp_t>
    private var stream: UnsafeMutablePointer<uv_stream_t> {
        UnsafeMutableRawPointer(handle).assumingMemoryBound(to: uv_stream_t.self)
    }
    private var pendingWrites = 0
    private var readPausedByOwner = true
    private var readPausedByBackpressure = false
    private var isReading = false
    private var closeError: LoopError?
    private var state = State.open

    private enum State { case open, shuttingDown, lingering, closing, closed }
    /// Bounds a close after writes: the drain of the queue, then the linger.
    private var closeTimer: Timer?

    /// Wraps a handle that libuv already initialised (and connected or accepted).
    package init(loop: EventLoop, initializedHandle: UnsafeMutablePointer<uv_tcp_t>) {
        self.loop = loop
        self.handle = initializedHandle
        handle.pointee.data = Unmanaged.passRetained(self).toOpaque()
        loop.liveTCPConnections.increment()
    }

    deinit {
        loop.liveTCPConnections.decrement()
    }

    /// Bytes handed to ``write(_:)`` that the kernel has not taken yet.
    public var unsentBytes: Int { state == .closed ? 0 : stream.pointee.write_queue_size }

    /// Whether the connection still accepts writes.
    public var isOpen: Bool { state == .open }

    /// The peer's address as `ip:port`, or nil once the socket is gone.
    public var remoteAddress: String? { peerAddress?.description }

    /// The peer's address, or nil once the socket is gone.
    public var peerAddress: SocketAddress? {
        guard state != .closed else { return nil }
        var storage = sockaddr_storage()
        var length = Int32(MemoryLayout<sockaddr_storage>.size)
        let status = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { uv_tcp_getpeername(handle, $0, &length) }
        }
        guard status == 0 else { return nil }
        return SocketAddress(storage)
    }

    /// Sets the socket's kernel send buffer (`SO_SNDBUF`; Linux doubles the value and
    /// applies a minimum). A small buffer keeps a stream of tiny messages cheap in the
    /// kernel and makes a peer that stops reading show up quickly as ``unsentBytes``.
    public func setSendBufferSize(_ bytes: Int) throws(LoopError) {
        guard state == .open else { return }
        var value = Int32(clamping: bytes)
        try LoopError.check(
            uv_send_buffer_size(asHandle(handle), &value), "send buffer size \(bytes)")
    }

    /// Has the kernel acknowledge what it has received now instead of delaying the ACK
    /// (`TCP_QUICKACK`; Linux only, nothing elsewhere). Not sticky: the kernel goes back to
    /// delaying ACKs by itself, so call it each time an acknowledgement is awaited, as by
    /// a peer with Nagle's algorithm on that holds its next small segment until then.
    public func acknowledgeReceived() {
        #if os(Linux)
            guard state == .open, let descriptor = fileDescriptor else { return }
            var on: Int32 = 1
            setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_QUICKACK, &on, socklen_t(MemoryLayout<Int32>.size))
        #endif
    }

    /// The socket's descriptor, nil once it is gone (for tests that look at its options).
    package var fileDescriptor: Int32? {
        guard state != .closed else { return nil }
        var descriptor: uv_os_fd_t = -1
        return uv_fileno(asHandle(handle), &descriptor) == 0 ? descriptor : nil
    }

    // MARK: - Reading

    /// Starts (or resumes) delivering reads to the delegate.
    public func startReading() {
        readPausedByOwner = false
        updateReading()
    }

    /// Stops delivering reads until ``startReading()``; the kernel buffers meanwhile.
    public func pauseReading() {
        readPausedByOwner = true
        updateReading()
    }

    private func updateReading() {
        let want =
            state == .lingering || (state == .open && !readPausedByOwner && !readPausedByBackpressure)
        guard want != isReading else { return }
        isReading = want
        if want {
            uv_read_start(
                stream,
                { handle, _, buffer in
                    let loop = Unmanaged<TCPConnection>.fromOpaque(handle!.pointee.data).takeUnretainedValue().loop
                    buffer!.pointee = uv_buf_init(
                        loop.readBuffer.baseAddress!.assumingMemoryBound(to: CChar.self),
                        UInt32(loop.readBuffer.count))
                },
                { stream, count, buffer in
                    let connection = Unmanaged<TCPConnection>.fromOpaque(stream!.pointee.data).takeUnretainedValue()
                    connection.didRead(count: count, buffer: buffer!.pointee)
                })
        } else {
            uv_read_stop(stream)
        }
    }

    private func didRead(count: Int, buffer: uv_buf_t) {
        if state == .lingering {
            // Discard what the peer still sends; its end (or an error) ends the linger.
            if count < 0 { close() }
            return
        }
        if count > 0 {
            delegate?.connection(self, didRead: UnsafeRawBufferPointer(start: buffer.base, count: count))
        } else if count == Int(UV_EOF.rawValue) {
            readPausedByOwner = true
            updateReading()
            delegate?.connectionDidReachEnd(self)
        } else if count < 0 {
            close(error: LoopError(code: Int32(count), operation: "read"))
        }
    }

    // MARK: - Writing

    /// Sends `bytes` after everything written before. Copies only what the kernel
    /// does not take at once. Writes after close are dropped.
    public func write(_ bytes: UnsafeRawBufferPointer) {
        guard state == .open, bytes.count > 0 else { return }
        var remaining = bytes
        if pendingWrites == 0 {
            var buffer = uv_buf_init(
                UnsafeMutablePointer(mutating: bytes.baseAddress!.assumingMemoryBound(to: CChar.self)),
                UInt32(bytes.count))
            let written = uv_try_write(stream, &buffer, 1)
            if written == bytes.count { return }
            if written < 0 && written != UV_EAGAIN.rawValue {
                close(error: LoopError(code: written, operation: "write"))
                return
            }
            remaining = UnsafeRawBufferPointer(rebasing: bytes[max(Int(written), 0)...])
        }
        enqueue(remaining)
    }

    /// Sends the bytes of `array` (see ``write(_:)-(UnsafeRawBufferPointer)``).
    public func write(_ array: [UInt8]) {
        array.withUnsafeBytes { write($0) }
    }

    /// Sends the UTF-8 bytes of `string`.
    public func write(_ string: String) {
        var string = string
        string.withUTF8 { write(UnsafeRawBufferPointer($0)) }
    }

    private func enqueue(_ bytes: UnsafeRawBufferPointer) {
        // One allocation holds the request and a copy of the bytes; the write
        // callback frees both.
        let requestSize = MemoryLayout<uv_write_t>.stride
        let block = UnsafeMutableRawPointer.allocate(byteCount: requestSize + bytes.count, alignment: 16)
        let request = block.bindMemory(to: uv_write_t.self, capacity: 1)
        let copy = block + requestSize
        copy.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        var buffer = uv_buf_init(copy.assumingMemoryBound(to: CChar.self), UInt32(bytes.count))
        pendingWrites += 1
        let status = uv_write(request, stream, &buffer, 1) { request, status in
            let stream = request!.pointee.handle!
            let connection = Unmanaged<TCPConnection>.fromOpaque(stream.pointee.data).takeUnretainedValue()
            UnsafeMutableRawPointer(request!).deallocate()
            connection.didWrite(status: status)
        }
        if status < 0 {
            pendingWrites -= 1
            block.deallocate()
            close(error: LoopError(code: status, operation: "write"))
            return
        }
        if unsentBytes > highWaterMark && !readPausedByBackpressure {
            readPausedByBackpressure = true
            updateReading()
        }
    }

    private func didWrite(status: Int32) {
        pendingWrites -= 1
        if status < 0 {
            if status != UV_ECANCELED.rawValue { close(error: LoopError(code: status, operation: "write")) }
            return
        }
        if readPausedByBackpressure && unsentBytes <= lowWaterMark {
            readPausedByBackpressure = false
            updateReading()
            delegate?.connectionDidDrain(self)
        }
        if pendingWrites == 0 && state == .open { delegate?.connectionDidFlush(self) }
    }

    // MARK: - Closing

    /// Closes once every queued byte is sent: half-closes (FIN), then reads and
    /// discards whatever the peer still sends until it closes its side or
    /// `lingerMilliseconds` pass, then closes. When the queued bytes are not all sent
    /// within `drainMilliseconds` it closes at once, dropping them: a peer that reads
    /// nothing would otherwise hold the connection forever. nil: no bound (the owner
    /// keeps its own, as HTTP does).
    ///
    /// Closing a socket with unread bytes makes the kernel send a reset, which can
    /// destroy the last response before the peer reads it (an upload refused with
    /// 413 while its body is still arriving); lingering avoids that.
    public func closeAfterWrites(lingerMilliseconds: UInt64 = 2_000, drainMilliseconds: UInt64? = 2_000) {
        guard state == .open else { return }
        state = .shuttingDown
        self.lingerMilliseconds = lingerMilliseconds
        if let drainMilliseconds, unsentBytes > 0 {
            let timer = Timer(loop: loop)
            timer.start(after: drainMilliseconds) { [unowned self] in close() }
            closeTimer = timer
        }
        let request = UnsafeMutablePointer<uv_shutdown_t>.allocate(capacity: 1)
        let status = uv_shutdown(request, stream) { request, status in
            let stream = request!.pointee.handle!
            let connection = Unmanaged<TCPConnection>.fromOpaque(stream.pointee.data).takeUnretainedValue()
            request!.deallocate()
            if status < 0 { connection.close() } else { connection.linger() }
        }
        if status < 0 {
            request.deallocate()
            close()
        }
    }

    private var lingerMilliseconds: UInt64 = 0

    private func linger() {
        guard state == .shuttingDown else { return }
        state = .lingering
        updateReading()
        closeTimer?.close()
        let timer = Timer(loop: loop)
        timer.start(after: lingerMilliseconds) { [unowned self] in close() }
        closeTimer = timer
    }

    /// Closes now; unsent bytes are dropped.
    public func close() {
        close(error: nil)
    }

    private func close(error: LoopError?) {
        guard state == .open || state == .shuttingDown || state == .lingering else { return }
        state = .closing
        closeTimer?.close()
        closeTimer = nil
        closeError = error
        uv_close(asHandle(handle)) { handle in
            let connection = Unmanaged<TCPConnection>.fromOpaque(handle!.pointee.data).takeRetainedValue()
            handle!.deallocate()
            connection.state = .closed
            let delegate = connection.delegate
            connection.delegate = nil
            delegate?.connectionDidClose(connection, error: connection.closeError)
        }
    }
}

extension TCPConnection {
    /// Opens a connection to `address` and calls `completion` on `loop` with it
    /// (not yet reading) or with the error. A connect still pending when `loop` stops is
    /// abandoned: `completion` is not called.
    ///
    /// `from` binds the socket to a local address first (its port 0 lets the kernel
    /// pick one). A load generator spreads connections over several loopback source
    /// addresses (`127.0.0.2`, `127.0.0.3`, …) this way: each source address has its
    /// own range of ephemeral ports (about 28,000 on Linux), so one destination can
    /// take more connections than one source address allows.
    public static func connect(
        on loop: EventLoop, to address: SocketAddress, from source: SocketAddress? = nil,
        _ completion: @escaping (Result<TCPConnection, LoopError>) -> Void
    ) {
        loop.preconditionInEventLoop()
        final class Attempt {
            let loop: EventLoop
            let completion: (Result<TCPConnection, LoopError>) -> Void
            init(loop: EventLoop, completion: @escaping (Result<TCPConnection, LoopError>) -> Void) {
                self.loop = loop
                self.completion = completion
            }
        }
        let handle = UnsafeMutablePointer<uv_tcp_t>.allocate(capacity: 1)
        uv_tcp_init(loop.uv, handle)
        if let source {
            let status = source.withSockAddr { sockaddr, _ in uv_tcp_bind(handle, sockaddr, 0) }
            if status < 0 {
                uv_close(asHandle(handle)) { $0?.deallocate() }
                completion(.failure(LoopError(code: status, operation: "bind \(source)")))
                return
            }
        }
        let request = UnsafeMutablePointer<uv_connect_t>.allocate(capacity: 1)
        request.pointee.data = Unmanaged.passRetained(Attempt(loop: loop, completion: completion)).toOpaque()
        let status = address.withSockAddr { sockaddr, _ in
            uv_tcp_connect(request, handle, sockaddr) { request, status in
                let attempt = Unmanaged<Attempt>.fromOpaque(request!.pointee.data).takeRetainedValue()
                let handle = UnsafeMutableRawPointer(request!.pointee.handle!).assumingMemoryBound(to: uv_tcp_t.self)
                request!.deallocate()
                // A loop that stopped with the connect pending closed the handle itself (its
                // tear-down closes every handle) and cancels the connect: nobody waits for it
                // any more, and closing the handle again would abort in libuv.
                guard uv_is_closing(asHandle(handle)) == 0 else { return }
                if status < 0 {
                    uv_close(asHandle(handle)) { $0?.deallocate() }
                    attempt.completion(.failure(LoopError(code: status, operation: "connect")))
                } else {
                    uv_tcp_nodelay(handle, 1)
                    attempt.completion(.success(TCPConnection(loop: attempt.loop, initializedHandle: handle)))
                }
            }
        }
        if status < 0 {
            Unmanaged<Attempt>.fromOpaque(request.pointee.data).release()
            request.deallocate()
            uv_close(asHandle(handle)) { $0?.deallocate() }
            completion(.failure(LoopError(code: status, operation: "connect \(address)")))
        }
    }
}
