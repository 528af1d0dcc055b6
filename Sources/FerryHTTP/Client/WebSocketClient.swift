import Foundation

/// The client's side of the RFC 6455 opening handshake (the server's is
/// ``WebSocketHandshake``, whose accept value both sides compute).
public enum WebSocketClientHandshake {
    /// A fresh `Sec-WebSocket-Key`: 16 random bytes in base64.
    public static func makeKey() -> String {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }).base64EncodedString()
    }

    /// The upgrade request for `path` on `host` with a Bearer `token`.
    public static func request(path: String, host: String, key: String, token: String) -> String {
        "GET \(path) HTTP/1.1\r\nHost: \(host)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer \(token)\r\n\r\n"
    }

    /// Whether `head` completes the handshake started with `key`: `101`, the upgrade
    /// headers, and the accept value that proves the server read this key.
    public static func accepts(_ head: HTTPResponseHead, key: String) -> Bool {
        head.status == 101 && head.headers["upgrade"]?.lowercased() == "websocket"
            && head.headers["sec-websocket-accept"] == WebSocketHandshake.acceptValue(key: key)
    }
}

/// What a WebSocket client reads from a server: whole messages and control frames.
public enum WebSocketEvent: Equatable, Sendable {
    /// A complete text message (continuation frames joined).
    case text([UInt8])
    /// A complete binary message.
    case binary([UInt8])
    /// A ping; the client answers with a pong carrying `payload`.
    case ping([UInt8])
    /// A pong, with the payload of the ping it answers.
    case pong([UInt8])
    /// A close frame: its code when it carried one, and its reason.
    case close(code: UInt16?, reason: String)
}

/// The WebSocket frame opcodes RFC 6455 defines.
public enum WebSocketOpcode {
    /// Continues a fragmented message.
    public static let continuation: UInt8 = 0x0
    /// A text frame.
    public static let text: UInt8 = 0x1
    /// A binary frame.
    public static let binary: UInt8 = 0x2
    /// A close frame.
    public static let close: UInt8 = 0x8
    /// A ping.
    public static let ping: UInt8 = 0x9
    /// A pong.
    public static let pong: UInt8 = 0xA
}

/// A protocol error in what the server sent; the client closes the connection.
public struct WebSocketProtocolError: Error, Equatable, CustomStringConvertible {
    /// What was wrong.
    public let description: String
}

/// Reads what a WebSocket client receives from a byte stream: server frames are
/// unmasked (RFC 6455 5.1), control frames may arrive between the fragments of a message.
public struct WebSocketClientDecoder {
    /// Largest message accepted; Ferry's messages are a few hundred bytes.
    public var maximumMessageLength = 1 << 20

    private var buffer: [UInt8] = []
    private var start = 0
    private var fragments: [UInt8] = []
    private var fragmentedOpcode: UInt8?

    /// Creates an empty decoder.
    public init() {}

    /// Whether no partial frame or message is waiting for more bytes.
    public var isEmpty: Bool { start == buffer.count && fragmentedOpcode == nil }

    /// Adds bytes read from the socket.
    public mutating func append(_ bytes: some Collection<UInt8>) {
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 4096)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next complete event, nil when more bytes are needed.
    public mutating func next() throws(WebSocketProtocolError) -> WebSocketEvent? {
        while true {
            let available = buffer.count - start
            guard available >= 2 else { return nil }
            let first = buffer[start]
            let second = buffer[start + 1]
            let fin = first & 0x80 != 0
            let opcode = first & 0x0F
            guard first & 0x70 == 0 else { throw WebSocketProtocolError(description: "reserved bits set") }
            guard second & 0x80 == 0 else { throw WebSocketProtocolError(description: "masked frame from the server") }
            var headerLength = 2
            var length = Int(second & 0x7F)
            if length == 126 {
                guard available >= 4 else { return nil }
                length = Int(buffer[start + 2]) << 8 | Int(buffer[start + 3])
                headerLength = 4
            } else if length == 127 {
                guard available >= 10 else { return nil }
                var value: UInt64 = 0
                for offset in 2..<10 { value = value << 8 | UInt64(buffer[start + offset]) }
                guard value <= UInt64(maximumMessageLength) else {
                    throw WebSocketProtocolError(description: "frame of \(value) bytes")
                }
                length = Int(value)
                headerLength = 10
            }
            guard length <= maximumMessageLength else {
                throw WebSocketProtocolError(description: "frame of \(length) bytes")
            }
            guard available >= headerLength + length else { return nil }
            let payload = Array(buffer[(start + headerLength)..<(start + headerLength + length)])
            start += headerLength + length
            if start == buffer.count {
                buffer.removeAll(keepingCapacity: buffer.capacity <= 4096)
                start = 0
            }
            switch opcode {
            case WebSocketOpcode.ping:
                return .ping(payload)
            case WebSocketOpcode.pong:
                return .pong(payload)
            case WebSocketOpcode.close:
                guard payload.count >= 2 else { return .close(code: nil, reason: "") }
                return .close(
                    code: UInt16(payload[0]) << 8 | UInt16(payload[1]),
                    reason: String(decoding: payload[2...], as: UTF8.self))
            case WebSocketOpcode.text, WebSocketOpcode.binary:
                guard fragmentedOpcode == nil else {
                    throw WebSocketProtocolError(description: "new message inside a fragmented one")
                }
                if fin { return opcode == WebSocketOpcode.text ? .text(payload) : .binary(payload) }
                fragmentedOpcode = opcode
                fragments = payload
            case WebSocketOpcode.continuation:
                guard let messageOpcode = fragmentedOpcode else {
                    throw WebSocketProtocolError(description: "continuation without a message")
                }
                fragments += payload
                guard fragments.count <= maximumMessageLength else {
                    throw WebSocketProtocolError(description: "message of \(fragments.count) bytes")
                }
                if fin {
                    fragmentedOpcode = nil
                    defer { fragments = [] }
                    return messageOpcode == WebSocketOpcode.text ? .text(fragments) : .binary(fragments)
                }
            default:
                throw WebSocketProtocolError(description: "unknown opcode \(opcode)")
            }
        }
    }
}

/// Builds client frames: masked (RFC 6455 5.3) with a fresh random key unless told
/// otherwise (a test that breaks the RFC on purpose).
public enum WebSocketClientFrame {
    /// One frame of `opcode` carrying `payload`, final unless `final` is false, masked
    /// with `mask` (four bytes), or unmasked when `mask` is nil.
    public static func make(
        opcode: UInt8, payload: [UInt8], final: Bool = true, mask: [UInt8]? = randomMask()
    ) -> [UInt8] {
        precondition(mask == nil || mask!.count == 4, "a masking key is four bytes")
        let maskBit: UInt8 = mask == nil ? 0 : 0x80
        var frame: [UInt8] = [(final ? 0x80 : 0) | opcode]
        if payload.count < 126 {
            frame.append(maskBit | UInt8(payload.count))
        } else if payload.count <= 0xFFFF {
            frame += [maskBit | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        } else {
            frame.append(maskBit | 127)
            frame += (0..<8).reversed().map { UInt8((payload.count >> ($0 * 8)) & 0xFF) }
        }
        guard let mask else { return frame + payload }
        frame += mask
        for (index, byte) in payload.enumerated() { frame.append(byte ^ mask[index & 3]) }
        return frame
    }

    /// A text message in one frame.
    public static func text(_ text: String) -> [UInt8] { make(opcode: WebSocketOpcode.text, payload: Array(text.utf8)) }

    /// The answer to a ping.
    public static func pong(_ payload: [UInt8]) -> [UInt8] { make(opcode: WebSocketOpcode.pong, payload: payload) }

    /// A close frame with `code`, or with no code (an empty body) when it is nil.
    public static func close(code: UInt16?) -> [UInt8] {
        make(opcode: WebSocketOpcode.close, payload: code.map { [UInt8($0 >> 8), UInt8($0 & 0xFF)] } ?? [])
    }

    /// Four random bytes.
    public static func randomMask() -> [UInt8] {
        let value = UInt32.random(in: .min ... .max)
        return [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)]
    }
}
