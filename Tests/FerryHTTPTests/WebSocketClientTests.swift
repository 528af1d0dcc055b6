import FerryHTTP
import FerryTestSupport
import Testing

@Suite(.tagSelection) struct HTTPResponseHeadTests {
    @Test func parsesStatusHeadersAndWhereTheBodyStarts() {
        let bytes = Array(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept:  abc= \r\n\r\nrest".utf8)
        guard case .complete(let head) = HTTPResponseHead.parse(bytes[...]) else {
            Issue.record("no head")
            return
        }
        #expect(head.status == 101)
        #expect(head.headers["upgrade"] == "websocket")
        #expect(head.headers["sec-websocket-accept"] == "abc=")
        #expect(Array(bytes[head.length...]) == Array("rest".utf8))
    }

    @Test func aHeadWithoutItsBlankLineIsIncomplete() {
        #expect(
            HTTPResponseHead.parse(Array("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n".utf8)[...])
                == .incomplete)
    }

    @Test func somethingElseIsInvalid() {
        #expect(HTTPResponseHead.parse(Array("SSH-2.0-OpenSSH\r\n\r\n".utf8)[...]) == .invalid)
    }
}

@Suite(.tagSelection) struct WebSocketClientCodecTests {
    @Test func handshakeIsAcceptedOnlyWithTheRightAcceptValue() {
        let key = WebSocketClientHandshake.makeKey()
        #expect(key.count == 24)
        let good = HTTPResponseHead(
            status: 101,
            headers: ["upgrade": "WebSocket", "sec-websocket-accept": WebSocketHandshake.acceptValue(key: key)],
            length: 0)
        #expect(WebSocketClientHandshake.accepts(good, key: key))
        var wrongKey = good
        wrongKey.headers["sec-websocket-accept"] = WebSocketHandshake.acceptValue(
            key: WebSocketClientHandshake.makeKey())
        #expect(!WebSocketClientHandshake.accepts(wrongKey, key: key))
        var refused = good
        refused.status = 401
        #expect(!WebSocketClientHandshake.accepts(refused, key: key))
    }

    @Test func requestCarriesTheKeyAndTheBearerToken() {
        let request = WebSocketClientHandshake.request(
            path: "/v1/stream", host: "127.0.0.1:8080", key: "k==", token: "t.t.t")
        #expect(request.hasPrefix("GET /v1/stream HTTP/1.1\r\n"))
        #expect(request.contains("\r\nSec-WebSocket-Key: k==\r\n"))
        #expect(request.contains("\r\nAuthorization: Bearer t.t.t\r\n"))
        #expect(request.hasSuffix("\r\n\r\n"))
    }

    @Test func decodesTextFramesSplitAcrossReads() throws {
        let json = Array(#"{"type":"hello","user_id":"u"}"#.utf8)
        let frame = [0x81, UInt8(json.count)] + json
        var decoder = WebSocketClientDecoder()
        decoder.append(frame[..<5])
        #expect(try decoder.next() == nil)
        decoder.append(frame[5...])
        #expect(try decoder.next() == .text(json))
        #expect(try decoder.next() == nil)
        #expect(decoder.isEmpty)
    }

    @Test func decodesSixteenBitLengthsAndSeveralFramesInOneRead() throws {
        let long = [UInt8](repeating: 0x61, count: 300)
        let bytes = [0x81, 126, 0x01, 0x2C] + long + [0x89, 0x02, 0x70, 0x71] + [0x88, 0x02, 0x03, 0xE8]
        var decoder = WebSocketClientDecoder()
        decoder.append(bytes)
        #expect(try decoder.next() == .text(long))
        #expect(try decoder.next() == .ping([0x70, 0x71]))
        #expect(try decoder.next() == .close(code: 1000, reason: ""))
        #expect(try decoder.next() == nil)
    }

    @Test func joinsFragmentsAroundAControlFrame() throws {
        var decoder = WebSocketClientDecoder()
        decoder.append([0x01, 0x02, 0x7B, 0x22] + [0x89, 0x00] + [0x80, 0x01, 0x7D])
        #expect(try decoder.next() == .ping([]))
        #expect(try decoder.next() == .text([0x7B, 0x22, 0x7D]))
    }

    @Test func aMaskedServerFrameIsAProtocolError() {
        var decoder = WebSocketClientDecoder()
        decoder.append([0x81, 0x81, 1, 2, 3, 4, 0x61])
        #expect(throws: WebSocketProtocolError.self) { try decoder.next() }
    }

    @Test func clientFramesAreMasked() {
        let frame = WebSocketClientFrame.make(
            opcode: WebSocketOpcode.pong, payload: [1, 2, 3, 4, 5], mask: [9, 8, 7, 6])
        #expect(frame[0] == 0x8A)
        #expect(frame[1] == 0x80 | 5)
        #expect(Array(frame[2..<6]) == [9, 8, 7, 6])
        let masked: [UInt8] = [1 ^ 9, 2 ^ 8, 3 ^ 7, 4 ^ 6, 5 ^ 9]
        #expect(Array(frame[6...]) == masked)
        #expect(WebSocketClientFrame.close(code: 1000).count == 2 + 4 + 2)
    }
}
