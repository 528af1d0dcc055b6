import Foundation
import Glibc
import Synchronization

/// A TCP socket bound to 127.0.0.1 on a port the kernel chose, for tests that need a
/// free port or a peer that never answers.
public final class LoopbackSocket {
    /// The descriptor; closed with the socket.
    public let fd: Int32
    /// The port it is bound to.
    public let port: Int

    /// Binds a new socket to `port` (0: one the kernel chooses); `listening` also
    /// listens, so connections complete in the kernel's backlog and then hear nothing.
    /// With `reusePort` (`SO_REUSEPORT`) it may join the listeners of another server
    /// on that port, as a second process of the same user can.
    public init(listening: Bool = false, port requested: Int = 0, reusePort: Bool = false) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var one: Int32 = 1
        if reusePort && fd >= 0 { setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size)) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(requested).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ready =
            fd >= 0
            && withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                    bind(fd, pointer, length) == 0 && (!listening || listen(fd, 16) == 0)
                        && getsockname(fd, pointer, &length) == 0
                }
            }
        guard ready else {
            let code = errno
            if fd >= 0 { close(fd) }
            // Thrown before every property is set, so no deinit closes fd again.
            throw LoopbackSocketError(description: "loopback socket: errno \(code)")
        }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(fd) }

    /// Accepts every connection waiting in a listening socket's backlog and closes it
    /// at once; returns how many there were. Never blocks.
    public func acceptWaiting() -> Int {
        var accepted = 0
        var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while poll(&ready, 1, 0) > 0 {
            let connection = accept(fd, nil, nil)
            guard connection >= 0 else { break }
            close(connection)
            accepted += 1
        }
        return accepted
    }
}

/// Whether a server accepts connections on `port` of 127.0.0.1 now.
public func acceptsConnections(onLoopbackPort port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = UInt16(port).bigEndian
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
        }
    }
}

/// A free loopback port for a server the test starts next: bound, read back, released.
///
/// It comes from below the kernel's ephemeral range (`ip_local_port_range`). The
/// kernel takes outgoing connections' local ports from that range, so a port handed
/// out from inside it can be taken by any test's client before the server binds it
/// (`EADDRINUSE`); below it only another bind can take it, and this process hands
/// those out in turn.
public func freePort() throws -> Int {
    for _ in 0..<64 {
        guard let candidate = belowEphemeralPorts.next() else { break }
        if let socket = try? LoopbackSocket(port: candidate) { return socket.port }
    }
    return try LoopbackSocket().port
}

/// The ports `freePort()` hands out, in turn from a random start: 20000 up to the
/// kernel's ephemeral range.
private let belowEphemeralPorts = PortSequence(
    low: 20_000, high: (ephemeralPortRangeStart() ?? 32_768) - 1)

private final class PortSequence: Sendable {
    private let range: ClosedRange<Int>?
    private let last: Mutex<Int>

    init(low: Int, high: Int) {
        range = low <= high ? low...high : nil
        last = Mutex(range.map { Int.random(in: $0) } ?? 0)
    }

    func next() -> Int? {
        guard let range else { return nil }
        return last.withLock { last in
            last = last < range.upperBound ? last + 1 : range.lowerBound
            return last
        }
    }
}

private func ephemeralPortRangeStart() -> Int? {
    guard let text = try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)
    else { return nil }
    return text.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) }
}

/// Runs `body` with a loopback port that refuses every connection for as long as it
/// runs: bound, never listened on, so no other test's server can take it meanwhile
/// (a port from `freePort()` may be handed to one).
public func withClosedPort<T>(_ body: (Int) async throws -> T) async throws -> T {
    let socket = try LoopbackSocket()
    defer { withExtendedLifetime(socket) {} }
    return try await body(socket.port)
}

/// Why a loopback socket could not be made.
public struct LoopbackSocketError: Error, CustomStringConvertible {
    public var description: String
}
