import FerryHTTP
import Foundation
import Testing

struct WebSocketHandshakeTests {
    static let key = "dGhlIHNhbXBsZSBub25jZQ=="

    func request(
        method: HTTPMethod = .get, upgrade: String? = "websocket", connection: String? = "Upgrade",
        version: String? = "13", key: String? = WebSocketHandshakeTests.key
    ) -> HTTPRequest {
        var headers: HTTPHeaders = ["Host": "server.example.com"]
        if let upgrade { headers.add(name: "Upgrade", value: upgrade) }
        if let connection { headers.add(name: "Connection", value: connection) }
        if let version { headers.add(name: "Sec-WebSocket-Version", value: version) }
        if let key { headers.add(name: "Sec-WebSocket-Key", value: key) }
        return HTTPRequest(method: method, path: "/v1/stream", headers: headers, isUpgrade: true)
    }

    func refusal(_ request: HTTPRequest) -> HTTPResponse? {
        guard case .failure(let refusal) = WebSocketHandshake.validate(request) else { return nil }
        return refusal.response
    }

    @Test func rfc6455ExampleKeyGivesTheRFCsAcceptValue() throws {
        #expect(WebSocketHandshake.acceptValue(key: Self.key) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        let handshake = try WebSocketHandshake.validate(request()).get()
        #expect(handshake.accept == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        #expect(
            String(decoding: handshake.responseHead, as: UTF8.self)
                == "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
    }

    /// Browsers offer permessage-deflate: the offer is accepted as a handshake and the
    /// answer names no extension or subprotocol, so the client uses none (RFC 6455 9.1).
    @Test func offeredExtensionsAndSubprotocolsAreDeclined() throws {
        var offer = request()
        offer.headers.add(name: "Sec-WebSocket-Extensions", value: "permessage-deflate; client_max_window_bits")
        offer.headers.add(name: "Sec-WebSocket-Protocol", value: "chat, superchat")
        let head = String(decoding: try WebSocketHandshake.validate(offer).get().responseHead, as: UTF8.self)
        #expect(head.hasPrefix("HTTP/1.1 101 "))
        #expect(!head.lowercased().contains("sec-websocket-extensions"))
        #expect(!head.lowercased().contains("sec-websocket-protocol"))
    }

    @Test func headerValuesAreCaseInsensitiveAndConnectionIsATokenList() throws {
        #expect(throws: Never.self) {
            try WebSocketHandshake.validate(request(upgrade: "WebSocket", connection: "keep-alive, upgrade")).get()
        }
        let split = request(connection: "keep-alive")
        var headers = split.headers
        headers.add(name: "connection", value: "UPGRADE")
        var twoFields = split
        twoFields.headers = headers
        #expect(throws: Never.self) { try WebSocketHandshake.validate(twoFields).get() }
    }

    @Test func aWrongVersionIs400NamingVersion13() throws {
        for version in ["8", "14", "", nil] as [String?] {
            let response = try #require(refusal(request(version: version)))
            #expect(response.status == .badRequest)
            #expect(response.headers["Sec-WebSocket-Version"] == "13")
            #expect(String(decoding: response.body, as: UTF8.self).contains(#""code":"invalid_request""#))
        }
    }

    @Test func aKeyThatIsNotBase64Of16BytesIs400() throws {
        let bad = [
            "", "not base64!", "dGhlIHNhbXBsZSBub25jZQ", "dGhlIHNhbXBsZSBub25jZSE=",  // 17 bytes
            "dGhlIHNhbXBsZSBub25j",  // 15 bytes
            Data(repeating: 7, count: 32).base64EncodedString(),
        ]
        for key in bad {
            let response = try #require(refusal(request(key: key)), "key \(key) was accepted")
            #expect(response.status == .badRequest)
            #expect(response.headers["Sec-WebSocket-Version"] == nil)
        }
        #expect(refusal(request(key: nil))?.status == .badRequest)
    }

    @Test func missingUpgradeHeadersOrAnotherMethodIs400() {
        #expect(refusal(request(upgrade: nil))?.status == .badRequest)
        #expect(refusal(request(upgrade: "h2c"))?.status == .badRequest)
        #expect(refusal(request(connection: nil))?.status == .badRequest)
        #expect(refusal(request(connection: "keep-alive"))?.status == .badRequest)
        #expect(refusal(request(method: .post))?.status == .badRequest)
    }
}
