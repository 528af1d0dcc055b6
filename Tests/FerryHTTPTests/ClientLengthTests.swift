import FerryTestSupport
import Testing

@testable import FerryHTTP

/// Lengths and counts a client sends (`Content-Length`, chunk sizes, header fields,
/// WebSocket frame lengths): each is bounded before it sizes anything, and none traps.
@Suite(.hangLimit, .tagSelection) struct ClientLengthTests {
    /// The error the decoder (HTTPRequestDecoderTests' `decode`) ends `text` with, or nil.
    private func refusal(_ text: String, limits: HTTPLimits = HTTPLimits()) -> HTTPRequestError? {
        guard case .error(let error) = decode(text, limits: limits).last else { return nil }
        return error
    }

    @Test func contentLengthsUpTo64BitsAreTooLargeAndBeyondAreMalformed() {
        for length in ["1048577", "9223372036854775807", "9223372036854775808", "18446744073709551605"] {
            #expect(refusal("POST / HTTP/1.1\r\nContent-Length: \(length)\r\n\r\n") == .payloadTooLarge, "\(length)")
        }
        // ULLONG_MAX is http-parser's "no Content-Length": a client cannot send it.
        for length in ["18446744073709551615", "18446744073709551616", "99999999999999999999999", "-1"] {
            guard case .malformed = refusal("POST / HTTP/1.1\r\nContent-Length: \(length)\r\n\r\n") else {
                Issue.record("Content-Length \(length) was not refused as malformed")
                continue
            }
        }
    }

    @Test func aHugeChunkSizeIsBoundedByTheBodyLimitAndAnOverflowingOneIsMalformed() {
        let head = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        let small = HTTPLimits(maxBodyBytes: 4)
        #expect(refusal(head + "100001\r\nabcde", limits: small) == .payloadTooLarge)
        #expect(refusal(head + "fffffffffffffff\r\nabcde", limits: small) == .payloadTooLarge)
        guard case .malformed = refusal(head + "ffffffffffffffffff\r\nabc") else {
            Issue.record("a chunk size past 64 bits was not refused as malformed")
            return
        }
    }

    @Test func aDeclaredLengthReservesNoMoreThanASmallBuffer() {
        let parser = HTTPParser(limits: HTTPLimits(maxBodyBytes: 1 << 30))
        let head = Array("POST / HTTP/1.1\r\nContent-Length: 1073741824\r\n\r\nab".utf8)
        _ = head.withUnsafeBytes { parser.execute($0) }
        #expect(parser.progress == .body)
        #expect(parser.body.count == 2)
        #expect(parser.body.capacity < 2 * HTTPParser.maximumBodyReservation)
    }

    @Test func moreHeaderFieldsThanTheLimitAreHeadersTooLarge() {
        let fields = { (count: Int) in (0..<count).map { _ in "a:\r\n" }.joined() }
        #expect(
            decode("GET / HTTP/1.1\r\n\(fields(100))\r\n") == [
                .request(method: .get, path: "/", query: nil, body: "", keepAlive: true)
            ])
        #expect(refusal("GET / HTTP/1.1\r\n\(fields(101))\r\n") == .headersTooLarge)
        #expect(
            refusal("GET / HTTP/1.1\r\n\(fields(3))\r\n", limits: HTTPLimits(maxHeaderFields: 2)) == .headersTooLarge)
        #expect(HTTPLimits().maxHeaderFields == 100)
    }

    /// The header of a masked text frame announcing `length` payload bytes, and one byte.
    private func frame(announcing length: UInt64) -> [UInt8] {
        [0x81, 0x80 | 127] + (0..<8).reversed().map { UInt8(truncatingIfNeeded: length >> ($0 * 8)) }
            + [0x37, 0xFA, 0x21, 0x3D, 0x61]
    }

    @Test func aWebSocketFrameAnnouncing2To63Minus1BytesIsRefusedFromItsHeaderWith1009() throws {
        let server = try StreamTestServer(maxMessageBytes: 1024)
        defer { server.stop() }
        let socket = try RawWebSocket(server)
        #expect(server.log.waitFor("open 1"))
        try socket.client.send(frame(announcing: UInt64(Int64.max)))
        #expect(try socket.readClose().code == 1009)
        #expect(socket.client.waitForClose())
        #expect(!server.log.all.contains { $0.hasPrefix("message 1") })
    }

    /// RFC 6455 keeps the length's high bit zero: such a frame is a protocol error (1002),
    /// and other streams go on.
    @Test func aWebSocketFrameLengthWithTheHighBitSetClosesWith1002() throws {
        let server = try StreamTestServer(maxMessageBytes: 1024)
        defer { server.stop() }
        let bystander = try RawWebSocket(server)
        let offender = try RawWebSocket(server)
        #expect(server.log.waitFor("open 2"))
        try offender.client.send(frame(announcing: .max))
        #expect(try offender.readClose().code == 1002)
        #expect(offender.client.waitForClose())
        #expect(server.log.waitFor("close 2"))
        try bystander.sendText("still here")
        #expect(try bystander.readText() == "still here")
    }
}
