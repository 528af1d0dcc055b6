import FerryHTTP
import FerryLoop
import FerryTestSupport
import Foundation
import Testing

extension StreamTestServer {
    /// Whether WebSocket stream `number` holds wslay's context now (false once it is gone).
    func holdsFramingContext(_ number: Int) -> Bool {
        onStream(number) { ($0 as? WebSocketStream)?.holdsFramingContext ?? false }
    }

    /// Waits until stream `number` holds wslay's context (`true`) or has let go of it.
    func waitForFramingContext(_ number: Int, held: Bool) -> Bool {
        eventuallyHoldsBlocking(seconds: 5) { holdsFramingContext(number) == held }
    }
}

/// A WebSocket stream makes wslay's context only while a frame or message is in flight and
/// frees it when idle: the protocol must not notice the context coming and going.
@Suite(.hangLimit, .tags(.process), .tagSelection) struct WebSocketIdleContextTests {
    @Test func anIdleStreamHoldsNoContextBeforeOrAfterAMessage() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let socket = try RawWebSocket(server)
        #expect(server.log.waitFor("open 1"))
        #expect(!server.holdsFramingContext(1))
        try socket.sendText("one")
        #expect(try socket.readText() == "one")
        #expect(server.waitForFramingContext(1, held: false))
        server.onStream(1) { $0?.send(type: "hello", json: Array(#"{"type":"hello"}"#.utf8)) }
        #expect(try socket.readText() == #"{"type":"hello"}"#)
        #expect(!server.holdsFramingContext(1))
        try socket.sendText("two")
        #expect(try socket.readText() == "two")
    }

    /// One frame cut inside its header, after its mask key and inside its payload, each
    /// piece its own read: the context stays while the frame is partial.
    @Test(arguments: [1, 2, 6, 9]) func aFrameSplitAcrossReadsKeepsTheContextUntilItEnds(_ cut: Int) throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let socket = try RawWebSocket(server)
        #expect(server.log.waitFor("open 1"))
        let frame = RawWebSocket.frame(opcode: 0x1, Array("split message".utf8))
        try socket.client.send(Array(frame[..<cut]))
        #expect(server.waitForFramingContext(1, held: true), "cut at \(cut)")
        try socket.client.send(Array(frame[cut...]))
        #expect(try socket.readText() == "split message")
        #expect(server.waitForFramingContext(1, held: false))
    }

    /// Payloads with 16- and 64-bit lengths, larger than wslay's 4 KiB input buffer, sent in
    /// pieces: the header arithmetic behind "every byte belongs to a finished frame".
    @Test(arguments: [5_000, 70_000]) func aLargeMessageInPiecesArrivesWhole(_ size: Int) throws {
        let server = try StreamTestServer(maxMessageBytes: 80_000)
        defer { server.stop() }
        let socket = try RawWebSocket(server, timeout: 20)
        #expect(server.log.waitFor("open 1"))
        let text = String((0..<size).map { Character(UnicodeScalar(UInt8(0x61 + $0 % 26))) })
        let frame = RawWebSocket.frame(opcode: 0x1, Array(text.utf8))
        var offset = 0
        while offset < frame.count {
            let end = min(offset + 3_000, frame.count)
            try socket.client.send(Array(frame[offset..<end]))
            offset = end
            if offset < frame.count { #expect(server.waitForFramingContext(1, held: true)) }
        }
        #expect(try socket.readText() == text)
        #expect(server.waitForFramingContext(1, held: false))
        try socket.sendText("after")
        #expect(try socket.readText() == "after")
    }

    @Test func aPingWhileIdleIsAnsweredAndTheContextLetGo() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let socket = try RawWebSocket(server)
        #expect(server.log.waitFor("open 1"))
        for round in 0..<3 {
            #expect(!server.holdsFramingContext(1), "round \(round)")
            try socket.send(opcode: 0x9, Array("p\(round)".utf8))
            #expect(try socket.readEvent() == .pong(Array("p\(round)".utf8)))
            #expect(server.waitForFramingContext(1, held: false))
        }
    }

    /// Our heartbeat from idle, the peer's pong arriving while idle again, then a second
    /// heartbeat that knows the pong came.
    @Test func aHeartbeatFromIdleCountsAPongThatArrivesWhileIdle() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let socket = try RawWebSocket(server)
        #expect(server.log.waitFor("open 1"))
        #expect(server.onStream(1) { $0?.heartbeat() ?? false })
        guard case .ping = try socket.readEvent() else { throw RawWebSocketError(description: "no ping") }
        #expect(!server.holdsFramingContext(1))
        try socket.send(opcode: 0xA, [])
        #expect(server.waitForFramingContext(1, held: false))
        // The pong may still be in flight: a second heartbeat succeeds once it is read.
        #expect(eventuallyHoldsBlocking(seconds: 5) { server.onStream(1) { $0?.heartbeat() ?? false } })
        guard case .ping = try socket.readEvent() else { throw RawWebSocketError(description: "no second ping") }
    }

    @Test func aPeersCloseFromIdleIsAnswered() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let socket = try RawWebSocket(server)
        #expect(server.log.waitFor("open 1"))
        #expect(!server.holdsFramingContext(1))
        try socket.send(opcode: 0x8, [0x03, 0xE8] + Array("bye".utf8))
        #expect(try socket.readClose() == (1000, "bye"))
        #expect(socket.client.waitForClose())
        #expect(server.log.waitFor("close 1"))
        #expect(server.log.count("close 1") == 1)
    }

    @Test func ourCloseFromIdleKeepsTheContextUntilThePeerAnswers() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let socket = try RawWebSocket(server)
        #expect(server.log.waitFor("open 1"))
        server.onStream(1) { $0?.close(code: 4001, reason: "token_expired") }
        #expect(try socket.readClose() == (4001, "token_expired"))
        #expect(server.holdsFramingContext(1))
        #expect(!server.onStream(1) { $0?.isOpen ?? false })
        try socket.send(opcode: 0x8, [0x0F, 0xA1])
        #expect(socket.client.waitForClose())
        #expect(server.log.waitFor("close 1"))
    }

    /// A fragmented message keeps the context between its frames, even when each frame
    /// ended with its read, and a ping between the fragments is answered.
    @Test func aFragmentedMessageWithAPingBetweenItsFramesKeepsTheContext() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let socket = try RawWebSocket(server)
        #expect(server.log.waitFor("open 1"))
        try socket.send(opcode: 0x1, Array("frag".utf8), fin: false)
        #expect(server.waitForFramingContext(1, held: true))
        try socket.send(opcode: 0x9, Array("between".utf8))
        #expect(try socket.readEvent() == .pong(Array("between".utf8)))
        #expect(server.holdsFramingContext(1))
        try socket.send(opcode: 0x0, Array("men".utf8), fin: false)
        let last = RawWebSocket.frame(opcode: 0x0, Array("ted".utf8))
        try socket.client.send(Array(last[..<3]))
        #expect(server.holdsFramingContext(1))
        try socket.client.send(Array(last[3...]))
        #expect(try socket.readText() == "fragmented")
        #expect(server.waitForFramingContext(1, held: false))
        #expect(server.log.all.contains("message 1 fragmented"))
    }

    /// Many frames (text, fragmented text, pings) as one byte stream cut into uneven pieces:
    /// every answer arrives in order and the stream ends idle.
    @Test func aByteStreamCutAnywhereIsParsedAsTheSameFrames() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let socket = try RawWebSocket(server)
        #expect(server.log.waitFor("open 1"))
        var bytes: [UInt8] = []
        var expected: [WebSocketEvent] = []
        for index in 0..<12 {
            switch index % 3 {
            case 0:
                bytes += RawWebSocket.frame(opcode: 0x1, Array("text \(index) ü".utf8))
                expected.append(.text(Array("text \(index) ü".utf8)))
            case 1:
                bytes += RawWebSocket.frame(opcode: 0x9, Array("ping \(index)".utf8))
                expected.append(.pong(Array("ping \(index)".utf8)))
            default:
                bytes += RawWebSocket.frame(opcode: 0x1, Array("frag".utf8), fin: false)
                bytes += RawWebSocket.frame(opcode: 0x0, Array(" \(index)".utf8))
                expected.append(.text(Array("frag \(index)".utf8)))
            }
        }
        var offset = 0
        var piece = 1
        while offset < bytes.count {
            let end = min(offset + piece, bytes.count)
            try socket.client.send(Array(bytes[offset..<end]))
            offset = end
            piece = piece % 7 + 1
            // Pacing only, so the pieces tend to arrive as separate reads.
            Thread.sleep(forTimeInterval: 0.002)
        }
        for event in expected { #expect(try socket.readEvent() == event) }
        #expect(server.waitForFramingContext(1, held: false))
    }
}
