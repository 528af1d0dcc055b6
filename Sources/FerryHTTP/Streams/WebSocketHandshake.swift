import CCrypto
import Foundation

/// A validated RFC 6455 opening handshake: what the server needs to answer
/// `101 Switching Protocols`.
///
/// Pure (no socket): ``validate(_:)`` checks the request, ``responseHead`` is the
/// answer's bytes. Extensions and subprotocols are not negotiated: the answer
/// names none, so the client uses neither.
public struct WebSocketHandshake: Sendable, Equatable {
    /// The `Sec-WebSocket-Accept` value: base64(SHA-1(key + the RFC's GUID)).
    public let accept: String

    /// The GUID RFC 6455 appends to the client's key.
    static let guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// Checks a WebSocket opening handshake: a `GET` with `Upgrade: websocket`,
    /// `Connection` holding the `upgrade` token, `Sec-WebSocket-Version: 13` and a
    /// `Sec-WebSocket-Key` that is the base64 of 16 bytes.
    ///
    /// Anything else is refused with `400 invalid_request` (with `Sec-WebSocket-Version: 13`
    /// when the version is the problem, as RFC 6455 asks): answer with the refusal's
    /// ``Refusal/response``.
    public static func validate(_ request: HTTPRequest) -> Result<WebSocketHandshake, Refusal> {
        func refuse(_ message: String) -> Result<WebSocketHandshake, Refusal> {
            .failure(Refusal(response: .error(status: .badRequest, code: "invalid_request", message: message)))
        }
        guard request.method == .get else { return refuse("a WebSocket handshake is a GET") }
        guard let upgrade = request.headers["Upgrade"], containsToken(upgrade, "websocket") else {
            return refuse("Upgrade: websocket is required")
        }
        guard request.headers.values(for: "Connection").contains(where: { containsToken($0, "upgrade") }) else {
            return refuse("Connection: Upgrade is required")
        }
        guard request.headers["Sec-WebSocket-Version"]?.trimmingASCIISpaces == "13" else {
            var response = HTTPResponse.error(
                status: .badRequest, code: "invalid_request", message: "Sec-WebSocket-Version must be 13")
            response.headers.add(name: "Sec-WebSocket-Version", value: "13")
            return .failure(Refusal(response: response))
        }
        guard let key = request.headers["Sec-WebSocket-Key"]?.trimmingASCIISpaces,
            let decoded = Data(base64Encoded: key), decoded.count == 16
        else {
            return refuse("Sec-WebSocket-Key must be the base64 of 16 bytes")
        }
        return .success(WebSocketHandshake(accept: acceptValue(key: key)))
    }

    /// Why a request is not a WebSocket handshake, as the response to answer it with.
    public struct Refusal: Error, Sendable {
        /// The `400 invalid_request` to send.
        public let response: HTTPResponse
    }

    /// base64(SHA-1(`key` + GUID)), the `Sec-WebSocket-Accept` for `key`.
    public static func acceptValue(key: String) -> String {
        let input = Array((key + guid).utf8)
        var digest = [UInt8](repeating: 0, count: Int(SHA_DIGEST_LENGTH))
        let status = EVP_Digest(input, input.count, &digest, nil, EVP_sha1(), nil)
        precondition(status == 1, "OpenSSL could not compute SHA-1")
        return Data(digest).base64EncodedString()
    }

    /// The `101 Switching Protocols` head that completes the handshake.
    public var responseHead: [UInt8] {
        Array(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: \(accept)\r\n\r\n"
                .utf8)
    }

    /// Whether the comma-separated `list` holds `token` (ASCII case-insensitive).
    static func containsToken(_ list: String, _ token: String) -> Bool {
        list.split(separator: ",").contains { String($0).trimmingASCIISpaces.equalsIgnoringASCIICase(token) }
    }
}
