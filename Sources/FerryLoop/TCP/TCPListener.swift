import CLibUV
import Glibc

/// A listening TCP socket on one loop. Loop thread only.
///
/// With `reusePort`, every loop of a ``LoopGroup`` opens its own listener on the
/// same address (`SO_REUSEPORT`) and the kernel spreads new connections across
/// them, so no loop hands connections to another. The kernel lets any process of
/// the same user join such a group; ``checkNotServed(_:)`` and
/// ``otherListeners(on:excluding:)`` are how a server keeps an address to itself.
public final class TCPListener {
    /// The loop accepting on this socket.
    public let loop: EventLoop
    /// The bound address (its port is the real one when port 0 was asked for).
    public let address: SocketAddress
    /// The socket's inode number, by which the kernel lists it (`/proc/net/tcp`).
    public let inode: UInt64
    private let handle: UnsafeMutablePointer<uv_tcp_t>
    private var onAccept: ((TCPConnection) -> Void)?
    private var closed = false

    /// Binds and listens on `address`, calling `onAccept` with each new connection
    /// (not yet reading: the owner sets a delegate, then calls `startReading()`).
    public init(
        loop: EventLoop, address: SocketAddress, reusePort: Bool = true, backlog: Int32 = 1024,
        onAccept: @escaping (TCPConnection) -> Void
    ) throws(LoopError) {
        loop.preconditionInEventLoop()
        self.loop = loop
        let fd = Glibc.socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw LoopError(errno: errno, operation: "socket") }
        var one: Int32 = 1
        let size = socklen_t(MemoryLayout<Int32>.size)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, size)
        if reusePort { setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, size) }
        let bound = address.withSockAddr { Glibc.bind(fd, $0, $1) }
        guard bound == 0 else {
            let error = LoopError(errno: errno, operation: "bind \(address)")
            Glibc.close(fd)
            throw error
        }
        var status = stat()
        fstat(fd, &status)
        inode = UInt64(status.st_ino)
        let handle = UnsafeMutablePointer<uv_tcp_t>.allocate(capacity: 1)
        uv_tcp_init(loop.uv, handle)
        var result = uv_tcp_open(handle, fd)
        var local = sockaddr_storage()
        var length = Int32(MemoryLayout<sockaddr_storage>.size)
        if result == 0 {
            result = withUnsafeMutablePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { uv_tcp_getsockname(handle, $0, &length) }
            }
        }
        self.handle = handle
        self.address = SocketAddress(local)
        self.onAccept = onAccept
        handle.pointee.data = Unmanaged.passRetained(self).toOpaque()
        if result == 0 {
            result = uv_listen(UnsafeMutableRawPointer(handle).assumingMemoryBound(to: uv_stream_t.self), backlog) {
                server, status in
                guard status == 0, let data = server?.pointee.data else { return }
                Unmanaged<TCPListener>.fromOpaque(data).takeUnretainedValue().acceptOne()
            }
        }
        if result < 0 {
            close()
            throw LoopError(code: result, operation: "listen \(address)")
        }
    }

    private func acceptOne() {
        let client = UnsafeMutablePointer<uv_tcp_t>.allocate(capacity: 1)
        uv_tcp_init(loop.uv, client)
        let status = uv_accept(
            UnsafeMutableRawPointer(handle).assumingMemoryBound(to: uv_stream_t.self),
            UnsafeMutableRawPointer(client).assumingMemoryBound(to: uv_stream_t.self))
        guard status == 0 else {
            uv_close(asHandle(client)) { $0?.deallocate() }
            return
        }
        uv_tcp_nodelay(client, 1)
        onAccept?(TCPConnection(loop: loop, initializedHandle: client))
    }

    /// Stops accepting. Connections already accepted are not affected.
    public func close() {
        guard !closed else { return }
        closed = true
        onAccept = nil
        closeOwnedHandle(handle)
    }
}

// MARK: - Keeping an address to one process

extension TCPListener {
    /// Throws `EADDRINUSE` when a socket already listens on `address`, or on an
    /// address that covers it (`0.0.0.0` with the same port), with or without
    /// `SO_REUSEPORT`: a socket bound without `SO_REUSEPORT` is refused by any
    /// listener there. The probe is closed at once; `SO_REUSEADDR` keeps connections
    /// of an earlier server waiting out `TIME_WAIT` from refusing it. Port 0 is never
    /// served by anyone else and is not probed.
    public static func checkNotServed(_ address: SocketAddress) throws(LoopError) {
        guard address.port != 0 else { return }
        let fd = Glibc.socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw LoopError(errno: errno, operation: "socket") }
        defer { Glibc.close(fd) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        guard address.withSockAddr({ Glibc.bind(fd, $0, $1) }) == 0 else {
            throw LoopError(errno: errno, operation: "bind \(address)")
        }
    }

    /// How many sockets listen on exactly `address` besides the inodes in `ours`,
    /// as the kernel lists them (`/proc/net/tcp` and `/proc/net/tcp6`; 0 where there
    /// are none to read). After ``checkNotServed(_:)`` passed and this process's
    /// listeners are bound, a count above 0 means another process bound the address
    /// in between, with `SO_REUSEPORT`, and now shares its connections.
    ///
    /// The kernel writes the table a page at a time, one `read` each, and resumes each
    /// page by its place in a hash bucket: a socket of the same bucket closing between
    /// two reads can shift a line past the reader. The count is over the union of three
    /// whole reads, so one shifted line does not hide a listener.
    public static func otherListeners(on address: SocketAddress, excluding ours: Set<UInt64>) -> Int {
        let reads = (0..<3).map { _ in KernelSocketTable.read(family: address.family).listeners(on: address) }
        return reads.reduce(into: Set<UInt64>()) { $0.formUnion($1) }.subtracting(ours).count
    }
}
