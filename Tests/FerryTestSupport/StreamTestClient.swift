import FerryHTTP
import Foundation

/// A blocking client of Ferry's streams (PROTOCOL.md "Streams") for tests: a WebSocket
/// (FerryHTTP's client codec: masked frames out, pings answered) or an SSE reader, over
/// an ``HTTPTestClient`` socket so every read is bounded by its timeout.
///
/// One thread at a time (tests hand it to ``offload``-style blocking work, never to two at once).
public final class StreamTestClient: @unchecked Sendable {
    /// Which endpoint to open.
    public enum Transport: Sendable, CaseIterable {
        /// `GET /v1/stream`.
        case webSocket
        /// `GET /v1/events`.
        case serverSentEvents
    }

    /// One JSON message as received.
    public struct Message: Sendable, CustomStringConvertible {
        /// The message's JSON text.
        public let json: String

        /// The message's `type`.
        public var type: String? { string("type") }

        /// A string member.
        public func string(_ key: String) -> String? { object[key] as? String }
        /// An integer member.
        public func int(_ key: String) -> Int? { object[key] as? Int }
        /// A list-of-strings member.
        public func strings(_ key: String) -> [String]? { object[key] as? [String] }
        /// Whether `key` is present with a JSON null.
        public func isNull(_ key: String) -> Bool { object[key] is NSNull }

        private var object: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any] ?? [:]
        }

        public var description: String { json }
    }

    /// What the server sent next.
    public enum Event: Sendable {
        /// A JSON message (a WebSocket text frame, or an SSE event's data).
        case message(Message)
        /// The stream ended: a WebSocket close frame, or SSE's `closed` event (nil code:
        /// the connection ended without either).
        case closed(code: Int?, reason: String)
    }

    /// The socket; tests may read its raw state.
    public let socket: HTTPTestClient
    /// The transport in use.
    public let transport: Transport
    /// How long each read may wait, seconds, unless the socket's timeout was changed.
    public let timeout: Double
    /// Heartbeats seen: WebSocket pings (answered) or SSE `: ping` comments.
    public private(set) var heartbeats = 0
    /// SSE `retry:` hint, once seen.
    public private(set) var retryMilliseconds: Int?
    /// The head the server opened the stream with (`101` or `200`).
    public private(set) var responseHead: HTTPTestResponse
    private var frames = WebSocketClientDecoder()

    /// Opens a stream; throws ``HTTPTestClientError`` with the status and body when the
    /// server refuses (no 101 / 200). Each read waits up to `timeout` seconds: long, since a
    /// loaded machine running the whole suite delays cues by seconds, and a test that
    /// passes never waits it out.
    /// `headers` go with the request too.
    public init(
        port: Int, transport: Transport, token: String?, tokenInQuery: Bool = false, timeout: Double = 15,
        receiveBufferBytes: Int32? = nil, headers: [(String, String)] = []
    ) throws {
        socket = try HTTPTestClient(port: port, timeout: timeout, receiveBufferBytes: receiveBufferBytes)
        self.transport = transport
        self.timeout = timeout
        var path = transport == .webSocket ? "/v1/stream" : "/v1/events"
        var head = ""
        if let token {
            if tokenInQuery { path += "?access_token=" + token } else { head += "Authorization: Bearer \(token)\r\n" }
        }
        switch transport {
        case .webSocket:
            let key = WebSocketClientHandshake.makeKey()
            head +=
                "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: \(key)\r\n"
        case .serverSentEvents:
            head += "Accept: text/event-stream\r\n"
        }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        try socket.send("GET \(path) HTTP/1.1\r\nHost: test\r\n\(head)\r\n")
        let response = try socket.readResponse(toHead: true)
        responseHead = response
        let expected = transport == .webSocket ? 101 : 200
        guard response.status == expected else {
            // The refusal is an ordinary response with a body.
            let body = response.header("Content-Length").flatMap(Int.init).map { try? socket.readBytes($0) } ?? nil
            throw HTTPTestClientError(
                description: "\(response.status) \(String(decoding: body ?? [], as: UTF8.self))")
        }
    }

    // MARK: - Receiving

    /// The next message or the end, answering WebSocket pings and counting heartbeats on the way.
    public func next() throws -> Event {
        switch transport {
        case .webSocket: return try nextFrame()
        case .serverSentEvents: return try nextEvent()
        }
    }

    /// Skips messages until one of `type`; throws if the stream ends first.
    public func nextMessage(ofType type: String) throws -> Message {
        for _ in 0..<10_000 {
            switch try next() {
            case .message(let message) where message.type == type: return message
            case .message: continue
            case .closed(let code, let reason):
                throw HTTPTestClientError(description: "stream closed (\(code ?? -1) \(reason)) before a \(type)")
            }
        }
        throw HTTPTestClientError(description: "no \(type) in 10,000 messages")
    }

    /// Skips messages until the stream ends; returns its close code and reason.
    public func nextClose() throws -> (code: Int?, reason: String) {
        for _ in 0..<10_000 {
            if case .closed(let code, let reason) = try next() { return (code, reason) }
        }
        throw HTTPTestClientError(description: "no close in 10,000 messages")
    }

    private func nextFrame() throws -> Event {
        while true {
            let event: WebSocketEvent
            do {
                guard let next = try frames.next() else {
                    frames.append(try socket.readAvailable())
                    continue
                }
                event = next
            } catch let error as WebSocketProtocolError {
                throw HTTPTestClientError(description: "the server broke RFC 6455: \(error)")
            }
            switch event {
            case .ping(let payload):
                heartbeats += 1
                try socket.send(WebSocketClientFrame.pong(payload))
            case .pong:
                continue
            case .close(let code, let reason):
                // Answer the close, as a client must.
                try? socket.send(WebSocketClientFrame.close(code: code))
                return .closed(code: code.map(Int.init), reason: reason)
            case .text(let message):
                return .message(try Self.message(message))
            case .binary:
                throw HTTPTestClientError(description: "the server sent a binary message")
            }
        }
    }

    private func nextEvent() throws -> Event {
        while true {
            let block: [UInt8]
            do {
                block = try socket.readThrough(Array("\n\n".utf8))
            } catch {
                return .closed(code: nil, reason: "connection ended")
            }
            var type = "message"
            var data = ""
            for line in String(decoding: block, as: UTF8.self).split(separator: "\n") {
                if line.hasPrefix(":") {
                    if line.dropFirst().trimmingPrefix(" ") == "ping" { heartbeats += 1 }
                } else if line.hasPrefix("event:") {
                    type = String(line.dropFirst(6).trimmingPrefix(" "))
                } else if line.hasPrefix("data:") {
                    data += line.dropFirst(5).trimmingPrefix(" ")
                } else if line.hasPrefix("retry:") {
                    retryMilliseconds = Int(line.dropFirst(6).trimmingPrefix(" "))
                }
            }
            // A comment (heartbeat) or the retry hint alone.
            guard !data.isEmpty else { continue }
            let message = try Self.message(Array(data.utf8))
            if type == "closed" {
                return .closed(code: message.int("code"), reason: message.string("reason") ?? "")
            }
            guard message.type == type else {
                throw HTTPTestClientError(description: "event \(type) carries \(message)")
            }
            return .message(message)
        }
    }

    private static func message(_ bytes: [UInt8]) throws -> Message {
        guard (try? JSONSerialization.jsonObject(with: Data(bytes))) is [String: Any] else {
            throw HTTPTestClientError(description: "not a JSON object: \(String(decoding: bytes, as: UTF8.self))")
        }
        return Message(json: String(decoding: bytes, as: UTF8.self))
    }

    // MARK: - Sending (WebSocket)

    /// Sends a text message (masked, as clients must).
    public func sendText(_ text: String) throws {
        try socket.send(WebSocketClientFrame.text(text))
    }

    /// Sends one frame; `masked: false` breaks RFC 6455 on purpose.
    public func sendFrame(opcode: UInt8, _ payload: [UInt8], masked: Bool = true, final: Bool = true) throws {
        let mask = masked ? WebSocketClientFrame.randomMask() : nil
        try socket.send(WebSocketClientFrame.make(opcode: opcode, payload: payload, final: final, mask: mask))
    }

    /// Closes the socket.
    public func close() { socket.close() }
}

// MARK: - From async tests

extension StreamTestClient {
    /// ``nextMessage(ofType:)`` off the caller's thread.
    public func nextMessageAsync(ofType type: String) async throws -> Message {
        try await offload { try self.nextMessage(ofType: type) }
    }

    /// ``nextClose()`` off the caller's thread.
    public func nextCloseAsync() async throws -> (code: Int?, reason: String) {
        let close = try await offload { () throws -> StreamClose in
            let close = try self.nextClose()
            return StreamClose(code: close.code, reason: close.reason)
        }
        return (close.code, close.reason)
    }
}

private struct StreamClose: Sendable {
    var code: Int?
    var reason: String
}
