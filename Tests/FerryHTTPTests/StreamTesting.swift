import Dispatch
import FerryHTTP
import FerryLoop
import FerryTestSupport
import Foundation
import Synchronization

/// What the streams of a ``StreamTestServer`` saw, one line per event (`open 1`,
/// `message 1 <text>`, `writable 1`, `close 1`), readable from the test thread.
final class StreamLog: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []

    var all: [String] { lock.withLock { lines } }

    func append(_ line: String) { lock.withLock { lines.append(line) } }

    /// Waits (at most `timeout` seconds, ``eventuallyHoldsBlocking(seconds:_:)``) until
    /// `line` is logged; false if it never is.
    func waitFor(_ line: String, timeout: Double = 5) -> Bool {
        eventuallyHoldsBlocking(seconds: timeout) { all.contains(line) }
    }

    func count(_ line: String) -> Int { all.filter { $0 == line }.count }
}

/// The streams a ``StreamTestServer`` opened, by number. Owned by the server's loop.
final class StreamRegistry {
    var streams: [Int: any EventStream] = [:]
    var opened = 0
}

/// An ``HTTPServer`` on one loop whose `GET /ws` (after ``WebSocketHandshake``) and `GET /sse` take the connection over
/// into a ``WebSocketStream`` or a ``ServerSentEventStream``.
///
/// A stream obeys the text messages its client sends: `close:<code>:<reason>` closes it,
/// `heartbeat` answers `{"alive":…}` with what ``EventStream/heartbeat()`` returned,
/// anything else comes back as an `echo` message. `GET /sse/script` sends `hello`, a
/// ping, a `cue`, then closes with `4001 token_expired`, 50 ms apart.
final class StreamTestServer {
    let group: LoopGroup
    let server: HTTPServer
    let port: Int
    let log = StreamLog()
    private let registry: LoopBound<StreamRegistry>

    var loop: EventLoop { group.loops[0] }

    init(maxMessageBytes: Int = 1024, closeTimeoutMilliseconds: UInt64 = 2_000, sendBufferSize: Int? = nil) throws {
        group = LoopGroup(count: 1)
        let loop = group.loops[0]
        let registry = LoopBound(sending: StreamRegistry(), loop: loop)
        self.registry = registry
        let log = log
        let routes: @Sendable (EventLoop) -> Router = { loop in
            /// Numbers and registers a stream, wires its callbacks to the log.
            func register(_ stream: any EventStream, tcp: TCPConnection) {
                let registry = registry.value
                registry.opened += 1
                let number = registry.opened
                registry.streams[number] = stream
                log.append("open \(number)")
                if let sendBufferSize { try? tcp.setSendBufferSize(sendBufferSize) }
                stream.onMessage = { [unowned stream] bytes in
                    let text = String(decoding: bytes, as: UTF8.self)
                    log.append("message \(number) \(text)")
                    StreamTestServer.obey(text, stream: stream)
                }
                stream.onWritable = { log.append("writable \(number)") }
                stream.onClose = {
                    log.append("close \(number)")
                    registry.streams[number] = nil
                }
            }
            var router = Router()
            router.get("/ws") { request, responder in
                switch WebSocketHandshake.validate(request) {
                case .failure(let refusal):
                    responder.respond(refusal.response)
                case .success(let handshake):
                    responder.takeOver { tcp, buffered in
                        let stream = WebSocketStream.open(
                            tcp: tcp, bufferedBytes: buffered, handshake: handshake, maxMessageBytes: maxMessageBytes,
                            closeTimeoutMilliseconds: closeTimeoutMilliseconds)
                        register(stream, tcp: tcp)
                    }
                }
            }
            router.get("/sse") { _, responder in
                responder.takeOver { tcp, buffered in
                    register(
                        ServerSentEventStream.open(tcp: tcp, bufferedBytes: buffered, retryMilliseconds: 1500), tcp: tcp
                    )
                }
            }
            router.get("/sse/script") { _, responder in
                responder.takeOver { tcp, buffered in
                    let stream = ServerSentEventStream.open(tcp: tcp, bufferedBytes: buffered, retryMilliseconds: 1500)
                    register(stream, tcp: tcp)
                    stream.send(type: "hello", json: Array(#"{"type":"hello","heartbeat_ms":25000}"#.utf8))
                    loop.schedule(after: 50) {
                        _ = stream.heartbeat()
                        loop.schedule(after: 50) {
                            stream.send(type: "cue", json: Array(#"{"type":"cue","tables":["a","b"]}"#.utf8))
                            loop.schedule(after: 50) { stream.close(code: 4001, reason: "token_expired") }
                        }
                    }
                }
            }
            return router
        }
        server = HTTPServer(
            configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0), group: group, router: routes)
        port = try server.start().port
    }

    /// What a stream does with a client's text message (see the type's comment).
    static func obey(_ text: String, stream: any EventStream) {
        if text.hasPrefix("close:") {
            let parts = text.split(separator: ":", maxSplits: 2).map(String.init)
            stream.close(code: UInt16(parts[1]) ?? 1000, reason: parts.count > 2 ? parts[2] : "")
        } else if text == "heartbeat" {
            let alive = stream.heartbeat()
            stream.send(type: "heartbeat", json: Array(#"{"alive":\#(alive)}"#.utf8))
        } else {
            stream.send(type: "echo", json: Array(text.utf8))
        }
    }

    /// Runs `body` on the server's loop with stream `number` (nil when gone) and waits for it.
    func onStream<T: Sendable>(_ number: Int, _ body: sending @escaping ((any EventStream)?) -> T) -> T {
        let registry = registry
        let result = Mutex<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        let task = LoopBound(sending: body, loop: loop)
        loop.execute {
            let value = task.value(registry.value.streams[number])
            result.withLock { $0 = value }
            done.signal()
        }
        _ = done.wait(timeout: .now() + 10)
        return result.withLock { $0! }
    }

    func client(timeout: Double = 5) throws -> HTTPTestClient { try HTTPTestClient(port: port, timeout: timeout) }

    /// Shuts down (waiting at most a few seconds) and stops the loop.
    func stop() {
        let done = DispatchSemaphore(value: 0)
        server.shutdown(deadline: .now + .seconds(2)) { done.signal() }
        _ = done.wait(timeout: .now() + 5)
        group.stop()
    }
}
