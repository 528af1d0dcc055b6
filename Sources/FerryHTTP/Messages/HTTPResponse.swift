import FerryJSON
import Foundation

/// An HTTP response: status, header fields and the whole body.
///
/// Do not set `Content-Length`, `Date` or `Connection`: the server writes those
/// itself (see ``HTTPResponseEncoder``) and drops any the response carries.
public struct HTTPResponse: Sendable {
    /// The status.
    public var status: HTTPStatus
    /// Header fields besides the ones the server adds.
    public var headers: HTTPHeaders
    /// The body bytes. Ignored for `HEAD` requests and for 1xx, 204 and 304 responses.
    public var body: [UInt8]

    /// Creates a response.
    public init(status: HTTPStatus, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    // MARK: - Helpers

    /// A `text/plain; charset=utf-8` response.
    public static func text(_ text: String, status: HTTPStatus = .ok) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "text/plain; charset=utf-8"], body: Array(text.utf8))
    }

    /// An `application/json` response from bytes already holding JSON (for example a
    /// body PostgreSQL built); the bytes are sent as they are.
    public static func json(status: HTTPStatus = .ok, bytes: [UInt8]) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: bytes)
    }

    /// An `application/json` response encoding `value` with Foundation's `JSONEncoder`.
    ///
    /// A value that fails to encode is a bug in the caller; it is answered with
    /// `500 internal` rather than a half-written body.
    public static func json(status: HTTPStatus = .ok, _ value: some Encodable) -> HTTPResponse {
        do {
            return json(status: status, bytes: Array(try JSONEncoder().encode(value)))
        } catch {
            return .error(status: .internalServerError, code: "internal", message: "response could not be encoded")
        }
    }

    /// A PROTOCOL.md error: `{"error": {"code", "message", "retryable"}}`.
    ///
    /// `retryable` is true exactly for 5xx and 429, as the protocol requires.
    public static func error(status: HTTPStatus, code: String, message: String) -> HTTPResponse {
        error(status: status, code: code, message: message, details: [])
    }

    /// A PROTOCOL.md error with more fields in the error object, e.g. `lock_held`'s
    /// `holder` or `resolution_required`'s `device_rows` and `cloud_rows`.
    public static func error(
        status: HTTPStatus, code: String, message: String, details: [(name: String, value: ErrorDetail)]
    ) -> HTTPResponse {
        var body: [UInt8] = []
        body.reserveCapacity(64 + code.utf8.count + message.utf8.count)
        body.append(contentsOf: #"{"error":{"code":"#.utf8)
        JSONString.append(code, to: &body)
        body.append(contentsOf: #","message":"#.utf8)
        JSONString.append(message, to: &body)
        let retryable = status.code >= 500 || status.code == 429
        body.append(contentsOf: (retryable ? #","retryable":true"# : #","retryable":false"#).utf8)
        for (name, value) in details {
            body.append(UInt8(ascii: ","))
            JSONString.append(name, to: &body)
            body.append(UInt8(ascii: ":"))
            switch value {
            case .string(let text): JSONString.append(text, to: &body)
            case .integer(let number): body.append(contentsOf: String(number).utf8)
            case .null: body.append(contentsOf: "null".utf8)
            case .json(let bytes): body.append(contentsOf: bytes)
            }
        }
        body.append(contentsOf: "}}".utf8)
        return json(status: status, bytes: body)
    }

    /// A value of an extra field in an error object.
    public enum ErrorDetail: Sendable, Equatable {
        /// A JSON string.
        case string(String)
        /// A JSON integer.
        case integer(Int)
        /// JSON null.
        case null
        /// A JSON value already encoded (an object PostgreSQL built), written as it is.
        case json([UInt8])
    }
}
