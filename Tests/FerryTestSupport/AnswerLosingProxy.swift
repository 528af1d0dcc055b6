import Foundation
import Glibc
import Synchronization

/// A loopback TCP proxy in front of a server that can lose answers, as a dropped
/// connection does: armed with ``loseAnswers(to:count:)``, it forwards a request whose
/// request line starts with the given text, and once the server's answer starts to
/// arrive (so the server has done, and committed, whatever the request asked) it closes
/// the client's connection instead of forwarding the answer. Everything else passes
/// through unchanged. One thread per connection; ``stop()`` ends them all (call it: the
/// threads keep the proxy alive until then).
///
/// `@unchecked Sendable`: its mutable state is in a `Mutex`; of the listener only the
/// descriptor is read, by the accepting thread.
public final class AnswerLosingProxy: @unchecked Sendable {
    /// The port clients connect to.
    public let port: Int
    private let target: Int
    private let listener: LoopbackSocket
    private struct State {
        var losing: String?
        var left = 0
        var lost = 0
        var stopped = false
    }
    private let state = Mutex(State())

    /// Starts a proxy on a free loopback port in front of 127.0.0.1:`target`.
    public init(to target: Int) throws {
        self.target = target
        listener = try LoopbackSocket(listening: true)
        port = listener.port
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    /// The server's URL through the proxy.
    public var url: String { "http://127.0.0.1:\(port)" }

    /// Loses the answers to the next `count` requests whose request line starts with
    /// `requestLine` (e.g. `POST /v1/push`).
    public func loseAnswers(to requestLine: String, count: Int = 1) {
        state.withLock {
            $0.losing = requestLine
            $0.left = count
        }
    }

    /// How many answers it has lost so far.
    public var answersLost: Int { state.withLock { $0.lost } }

    /// Stops accepting and ends every connection.
    public func stop() { state.withLock { $0.stopped = true } }

    private var stopped: Bool { state.withLock { $0.stopped } }

    private func acceptLoop() {
        var ready = pollfd(fd: listener.fd, events: Int16(POLLIN), revents: 0)
        while !stopped {
            guard poll(&ready, 1, 100) > 0 else { continue }
            let client = accept(listener.fd, nil, nil)
            guard client >= 0 else { continue }
            let server = connectToTarget()
            guard server >= 0 else {
                close(client)
                continue
            }
            Thread { [self] in relay(client: client, server: server) }.start()
        }
    }

    private func connectToTarget() -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return -1 }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(target).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        if !connected {
            close(fd)
            return -1
        }
        return fd
    }

    /// Copies bytes both ways until either side closes. A request starts with the first
    /// client bytes after an answer (HTTP/1.1 without pipelining, as clients send it).
    private func relay(client: Int32, server: Int32) {
        defer {
            close(client)
            close(server)
        }
        var fds = [
            pollfd(fd: client, events: Int16(POLLIN), revents: 0),
            pollfd(fd: server, events: Int16(POLLIN), revents: 0),
        ]
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var answering = true
        var doomed = false
        while !stopped {
            guard poll(&fds, 2, 100) > 0 else { continue }
            for (index, entry) in fds.enumerated() where entry.revents != 0 {
                let count = read(entry.fd, &buffer, buffer.count)
                guard count > 0 else { return }
                if index == 0 {
                    if answering {
                        // A new request: is it one whose answer goes missing?
                        let line = String(decoding: buffer[0..<min(count, 256)], as: UTF8.self)
                        doomed = state.withLock { state in
                            guard let losing = state.losing, state.left > 0, line.hasPrefix(losing) else {
                                return false
                            }
                            state.left -= 1
                            return true
                        }
                        answering = false
                    }
                } else {
                    answering = true
                    if doomed {
                        state.withLock { $0.lost += 1 }
                        return
                    }
                }
                guard writeAll(index == 0 ? server : client, buffer, count) else { return }
            }
        }
    }

    private func writeAll(_ fd: Int32, _ bytes: [UInt8], _ count: Int) -> Bool {
        var sent = 0
        while sent < count {
            let written = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, count - sent, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { return false }
            sent += written
        }
        return true
    }
}
