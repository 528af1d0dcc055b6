import FerryTestSupport
import Foundation
import Glibc
import Synchronization

/// A loopback TCP server that accepts connections, writes `greeting` on each (nothing,
/// or an SSE head and a `hello`) and then stays silent, holding them open: a server
/// whose connection died without a FIN, as a phone's NAT or a crashed proxy leaves one.
/// Accepts at most 50 connections, and none after ``close()``.
///
/// It accepts on a thread of its own, not on GCD's global queue, which the suite's
/// blocking tests can keep busy for seconds on a loaded machine.
final class SilentServer: Sendable {
    let port: Int
    // Not Sendable as a class, but only its `fd`, set at init and never changed, is
    // read here, and its deinit closes it once nothing uses the server any more.
    nonisolated(unsafe) private let listener: LoopbackSocket
    private let greeting: [UInt8]
    private let state = Mutex<(accepted: [Int32], closed: Bool, requests: [String], done: Bool)>(
        ([], false, [], false))

    /// Listens on a free loopback port and starts accepting.
    init(greeting: String = "") throws {
        listener = try LoopbackSocket(listening: true)
        port = listener.port
        self.greeting = Array(greeting.utf8)
        let thread = Thread { [self] in self.acceptLoop() }
        thread.start()
    }

    /// How many connections it accepted.
    var accepted: Int { state.withLock { $0.accepted.count } }

    /// The first bytes (up to 4 KiB) each connection sent, in order of acceptance.
    var requests: [String] { state.withLock { $0.requests } }

    /// Closes every accepted connection and stops accepting (waits for the thread, 10 s at most).
    func close() async {
        state.withLock { $0.closed = true }
        _ = try? await eventuallyHolds(seconds: 10) { state.withLock { $0.done } }
        let open = state.withLock { state -> [Int32] in
            defer { state.accepted = [] }
            return state.accepted
        }
        for fd in open { Glibc.close(fd) }
    }

    private func acceptLoop() {
        defer { state.withLock { $0.done = true } }
        // Polls in 100 ms steps, so close() is seen promptly; two minutes at most.
        for _ in 0..<1200 where accepted < 50 && !state.withLock({ $0.closed }) {
            var ready = pollfd(fd: listener.fd, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 100) > 0 else { continue }
            let fd = accept(listener.fd, nil, nil)
            guard fd >= 0 else { continue }
            let request = Self.readRequest(fd)
            _ = greeting.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            state.withLock {
                $0.accepted.append(fd)
                $0.requests.append(request)
            }
        }
    }

    /// What the client sent until the end of its head (or 4 KiB, or a second of silence).
    private static func readRequest(_ fd: Int32) -> String {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        for _ in 0..<64 where bytes.count < 4096 && !bytes.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)) {
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 1000) > 0 else { break }
            let count = recv(fd, &chunk, chunk.count, 0)
            guard count > 0 else { break }
            bytes += chunk[..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
