import FerryTestSupport
import Foundation
import Glibc
import Synchronization

/// A loopback HTTP/1.1 proxy in front of a gateway that loses answers on purpose: a
/// request whose head starts with `dropping` is forwarded and answered by the gateway,
/// and then, that first time only, the client's connection is closed instead of the
/// answer being passed on (the server did the work; the client never hears of it). Every
/// other request and answer passes as it is, one per connection (`Connection: close`, so
/// that no HTTP stack resends a request of its own on a kept-alive connection that
/// died). Bodies must carry `Content-Length`.
final class AnswerDroppingProxy: Sendable {
    let port: Int
    nonisolated(unsafe) private let listener: LoopbackSocket
    private let upstream: Int
    private let dropping: String
    private let state = Mutex<(seen: [String], dropped: Int, closed: Bool)>(([], 0, false))

    /// Listens on a free loopback port, forwarding to `upstream` on loopback.
    init(upstream: Int, dropping: String) throws {
        listener = try LoopbackSocket(listening: true)
        port = listener.port
        self.upstream = upstream
        self.dropping = dropping
        Thread { [self] in self.acceptLoop() }.start()
    }

    var url: String { "http://127.0.0.1:\(port)" }
    /// The request lines that came through, in order.
    var requests: [String] { state.withLock { $0.seen } }
    /// How many answers it lost.
    var dropped: Int { state.withLock { $0.dropped } }

    func close() { state.withLock { $0.closed = true } }

    private func acceptLoop() {
        for _ in 0..<3000 where !state.withLock({ $0.closed }) {
            var ready = pollfd(fd: listener.fd, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 100) > 0 else { continue }
            let client = accept(listener.fd, nil, nil)
            guard client >= 0 else { continue }
            Thread { [self] in self.serve(client) }.start()
        }
    }

    private func serve(_ client: Int32) {
        defer { Glibc.close(client) }
        guard let server = try? HTTPTestClient(port: upstream, timeout: 30) else { return }
        defer { server.close() }
        if let request = Self.readMessage(client) {
            let line = String(decoding: request.prefix { $0 != UInt8(ascii: "\r") }, as: UTF8.self)
            let drop = state.withLock { state in
                state.seen.append(line)
                guard line.hasPrefix(dropping), state.dropped == 0 else { return false }
                state.dropped += 1
                return true
            }
            guard (try? server.send(request)) != nil, let answer = try? server.readResponse() else { return }
            if drop { return }
            var head = "HTTP/1.1 \(answer.status) X\r\n"
            for (name, value) in answer.headers where !["content-length", "connection"].contains(name.lowercased()) {
                head += "\(name): \(value)\r\n"
            }
            if answer.status != 204 { head += "Content-Length: \(answer.body.count)\r\n" }
            let bytes = Array((head + "Connection: close\r\n\r\n").utf8) + answer.body
            _ = bytes.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
    }

    /// One request (head and a `Content-Length` body) from `fd`; nil once it closes.
    private static func readMessage(_ fd: Int32) -> [UInt8]? {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            if let end = bytes.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound {
                let head = String(decoding: bytes[..<end], as: UTF8.self).lowercased()
                let length =
                    head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                if bytes.count >= end + length { return Array(bytes[..<(end + length)]) }
            }
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 30_000) > 0 else { return nil }
            let count = recv(fd, &chunk, chunk.count, 0)
            guard count > 0 else { return nil }
            bytes += chunk[..<count]
        }
    }
}
