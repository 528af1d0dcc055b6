import FerryHTTP
import FerryLoop
import FerryTestSupport
import Foundation
import Testing

/// Why ``RawWebSocket`` gave up.
struct RawWebSocketError: Error, CustomStringConvertible {
    var description: String
}

/// A WebSocket client over a plain socket that writes frames byte by byte, so tests can
/// send what a library would refuse to (unmasked, oversized, not UTF-8), on FerryHTTP's
/// client codec.
final class RawWebSocket {
    let client: HTTPTestClient
    private var frames = WebSocketClientDecoder()

    /// Connects to `GET /ws` of `server` and completes the handshake; `early` is sent
    /// right behind the request, before the `101` arrives.
    init(_ server: StreamTestServer, timeout: Double = 5, early: [UInt8] = []) throws {
        client = try server.client(timeout: timeout)
        let key = "dGhlIHNhbXBsZSBub25jZQ=="
        try client.send(
            Array(
                ("GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    + "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n\r\n").utf8) + early)
        let response = try client.readResponse()
        guard response.status == 101, response.header("Sec-WebSocket-Accept") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" else {
            throw RawWebSocketError(description: "handshake answered \(response.status) \(response.headers)")
        }
    }

    /// Sends one frame; client frames are masked unless `masked` is false.
    func send(opcode: UInt8, _ payload: [UInt8], fin: Bool = true, masked: Bool = true) throws {
        try client.send(Self.frame(opcode: opcode, payload, fin: fin, masked: masked))
    }

    /// The bytes of one client frame, masked with a fixed key unless `masked` is false.
    static func frame(opcode: UInt8, _ payload: [UInt8], fin: Bool = true, masked: Bool = true) -> [UInt8] {
        WebSocketClientFrame.make(
            opcode: opcode, payload: payload, final: fin, mask: masked ? [0x37, 0xFA, 0x21, 0x3D] : nil)
    }

    func sendText(_ text: String) throws { try send(opcode: 0x1, Array(text.utf8)) }

    /// Reads what the server sends next: a message or a control frame.
    func readEvent() throws -> WebSocketEvent {
        while true {
            if let event = try frames.next() { return event }
            frames.append(try client.readAvailable())
        }
    }

    /// Reads until a close frame; returns its code (1005 when it had none) and reason.
    func readClose() throws -> (code: UInt16, reason: String) {
        for _ in 0..<100 {
            guard case .close(let code, let reason) = try readEvent() else { continue }
            return (code ?? 1005, reason)
        }
        throw RawWebSocketError(description: "no close frame in 100 frames")
    }

    func readText() throws -> String {
        let event = try readEvent()
        guard case .text(let bytes) = event else { throw RawWebSocketError(description: "expected text, got \(event)") }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension WebSocketEvent {
    /// Whether this is a ping.
    fileprivate var isPing: Bool {
        if case .ping = self { true } else { false }
    }
}

/// WebSocket streams over real sockets, against `websockets` and a raw-socket client.
@Suite(.hangLimit, .tags(.process), .tagSelection) struct WebSocketStreamTests {
    @Test func anIndependentClientExchangesMessagesPingsAndACloseCode() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let run = try PythonScript.run(
            arguments: [PythonScript.path("websocket_stream.py"), "ws://127.0.0.1:\(server.port)/ws"])
        #expect(run.status == 0, "websocket_stream.py failed:\n\(run.output)")
        #expect(run.output.contains("the WebSocket stream spoke RFC 6455"), "\(run.output)")
        #expect(server.log.all.contains(#"message 1 {"type": "auth", "access_token": "token-from-python"}"#))
        #expect(server.log.waitFor("close 1"))
        #expect(server.log.count("close 1") == 1)
    }

    @Test func aBadHandshakeIsRefusedWith400() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let response = try server.client().request(
            "GET", "/ws",
            headers: [
                ("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("Sec-WebSocket-Version", "8"),
            ])
        #expect(response.status == 400)
        #expect(response.header("Sec-WebSocket-Version") == "13")
    }

    @Test func serverMessagesAndFragmentedClientMessagesArrive() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let socket = try RawWebSocket(server)
        #expect(server.log.waitFor("open 1"))
        server.onStream(1) { $0?.send(type: "hello", json: Array(#"{"type":"hello"}"#.utf8)) }
        #expect(try socket.readText() == #"{"type":"hello"}"#)
        let long = String(repeating: "é", count: 300)
        try socket.send(opcode: 0x1, Array(long.utf8.prefix(301)), fin: false)
        try socket.send(opcode: 0x0, Array(long.utf8.dropFirst(301)))
        #expect(try socket.readText() == long)
        #expect(server.log.all.contains("message 1 \(long)"))
    }

    @Test func framesSentBeforeThe101AreReadAfterTheCallbacksAreSet() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let early = RawWebSocket.frame(opcode: 0x1, Array("early".utf8))
        let socket = try RawWebSocket(server, early: early)
        #expect(try socket.readText() == "early")
        #expect(server.log.all.contains("message 1 early"))
    }

    @Test func pingsAreAnsweredAndHeartbeatIsFalseWithoutAPong() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let socket = try RawWebSocket(server)
        try socket.send(opcode: 0x9, Array("abc".utf8))
        #expect(try socket.readEvent() == .pong(Array("abc".utf8)))

        try socket.sendText("heartbeat")
        #expect(try socket.readEvent().isPing)
        #expect(try socket.readText() == #"{"alive":true}"#)
        // No pong: the next heartbeat finds the peer dead and sends no ping.
        try socket.sendText("heartbeat")
        #expect(try socket.readText() == #"{"alive":false}"#)
        try socket.send(opcode: 0xA, [])
        try socket.sendText("heartbeat")
        #expect(try socket.readEvent().isPing)
        #expect(try socket.readText() == #"{"alive":true}"#)
    }

    @Test func aPeersCloseIsAnsweredAndTheConnectionCloses() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let socket = try RawWebSocket(server)
        try socket.send(opcode: 0x8, [0x03, 0xE8] + Array("bye".utf8))
        let close = try socket.readClose()
        #expect(close.code == 1000)
        #expect(socket.client.waitForClose())
        #expect(server.log.waitFor("close 1"))
        #expect(server.log.count("close 1") == 1)
    }

    @Test func ourCloseEndsTheConnectionWhenThePeerAnswersOrAfterTheBound() throws {
        let server = try StreamTestServer(closeTimeoutMilliseconds: 300)
        defer { server.stop() }
        let answering = try RawWebSocket(server)
        try answering.sendText("close:4003:session_revoked")
        let close = try answering.readClose()
        #expect(close.code == 4003 && close.reason == "session_revoked")
        try answering.send(opcode: 0x8, [0x0F, 0xA3])
        #expect(answering.client.waitForClose())
        #expect(server.log.waitFor("close 1"))

        let silent = try RawWebSocket(server)
        try silent.sendText("close:4008:too_slow")
        let started = ContinuousClock.now
        #expect(try silent.readClose() == (4008, "too_slow"))
        #expect(silent.client.waitForClose())
        #expect(ContinuousClock.now - started >= .milliseconds(200))
        #expect(server.log.waitFor("close 2"))
        #expect(server.log.count("close 2") == 1)
    }

    /// The protocol errors a client can make, each with the close code RFC 6455 gives it.
    enum FrameError: String, CaseIterable, Sendable {
        case unmasked, oversized, badUTF8, binary
        /// A ping split over two frames: control frames must not be fragmented (5.5).
        case fragmentedPing
        /// A ping with 126 bytes: a control frame's payload is at most 125 (5.5).
        case oversizedPing
        /// A close frame with one byte: a body is a two-byte code and a reason, or nothing (5.5.1).
        case oneByteClose

        var code: UInt16 {
            switch self {
            case .unmasked, .fragmentedPing, .oversizedPing, .oneByteClose: 1002
            case .oversized: 1009
            case .badUTF8: 1007
            case .binary: 1003
            }
        }

        func send(_ socket: RawWebSocket) throws {
            switch self {
            case .unmasked: try socket.send(opcode: 0x1, Array("hello".utf8), masked: false)
            case .oversized: try socket.send(opcode: 0x1, [UInt8](repeating: 0x61, count: 2000))
            case .badUTF8: try socket.send(opcode: 0x1, [0x61, 0xC3, 0x28])
            case .binary: try socket.send(opcode: 0x2, [1, 2, 3])
            case .fragmentedPing:
                try socket.send(opcode: 0x9, Array("pi".utf8), fin: false)
                try socket.send(opcode: 0x0, Array("ng".utf8))
            case .oversizedPing: try socket.send(opcode: 0x9, [UInt8](repeating: 0x70, count: 126))
            case .oneByteClose: try socket.send(opcode: 0x8, [0x03])
            }
        }

        var name: String { rawValue }
    }

    @Test(arguments: FrameError.allCases) func aFrameErrorClosesWithItsCodeAndOtherStreamsGoOn(_ error: FrameError)
        throws
    {
        let server = try StreamTestServer(maxMessageBytes: 1024)
        defer { server.stop() }
        let bystander = try RawWebSocket(server)
        let offender = try RawWebSocket(server)
        #expect(server.log.waitFor("open 2"))
        try error.send(offender)
        #expect(try offender.readClose().code == error.code, "\(error.name)")
        #expect(offender.client.waitForClose(), "\(error.name)")
        #expect(server.log.waitFor("close 2"), "\(error.name)")
        #expect(!server.log.all.contains { $0.hasPrefix("message 2") }, "\(error.name)")

        try bystander.sendText("still here")
        #expect(try bystander.readText() == "still here")
        #expect(!server.log.all.contains("close 1"))
    }
}
