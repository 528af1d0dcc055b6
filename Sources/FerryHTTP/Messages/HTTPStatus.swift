/// An HTTP status code with its reason phrase.
public struct HTTPStatus: RawRepresentable, Hashable, Sendable, ExpressibleByIntegerLiteral, CustomStringConvertible {
    /// The three-digit code.
    public var code: Int
    /// The code, for `RawRepresentable`.
    public var rawValue: Int { code }

    /// Wraps any code from 100 to 999.
    public init(code: Int) {
        precondition((100...999).contains(code), "an HTTP status has three digits")
        self.code = code
    }

    /// Wraps `rawValue` (see ``init(code:)``).
    public init(rawValue: Int) { self.init(code: rawValue) }
    /// Lets a literal stand for a status: `let status: HTTPStatus = 418`.
    public init(integerLiteral value: Int) { self.init(code: value) }

    /// 100 Continue.
    public static let `continue`: HTTPStatus = 100
    /// 101 Switching Protocols.
    public static let switchingProtocols: HTTPStatus = 101
    /// 200 OK.
    public static let ok: HTTPStatus = 200
    /// 201 Created.
    public static let created: HTTPStatus = 201
    /// 202 Accepted.
    public static let accepted: HTTPStatus = 202
    /// 204 No Content.
    public static let noContent: HTTPStatus = 204
    /// 304 Not Modified.
    public static let notModified: HTTPStatus = 304
    /// 400 Bad Request.
    public static let badRequest: HTTPStatus = 400
    /// 401 Unauthorized.
    public static let unauthorized: HTTPStatus = 401
    /// 403 Forbidden.
    public static let forbidden: HTTPStatus = 403
    /// 404 Not Found.
    public static let notFound: HTTPStatus = 404
    /// 405 Method Not Allowed.
    public static let methodNotAllowed: HTTPStatus = 405
    /// 408 Request Timeout.
    public static let requestTimeout: HTTPStatus = 408
    /// 409 Conflict.
    public static let conflict: HTTPStatus = 409
    /// 413 Payload Too Large.
    public static let payloadTooLarge: HTTPStatus = 413
    /// 414 URI Too Long.
    public static let uriTooLong: HTTPStatus = 414
    /// 429 Too Many Requests.
    public static let tooManyRequests: HTTPStatus = 429
    /// 431 Request Header Fields Too Large.
    public static let headersTooLarge: HTTPStatus = 431
    /// 500 Internal Server Error.
    public static let internalServerError: HTTPStatus = 500
    /// 503 Service Unavailable.
    public static let serviceUnavailable: HTTPStatus = 503

    /// Whether a response with this status never has a body (1xx, 204, 304).
    public var forbidsBody: Bool { code < 200 || code == 204 || code == 304 }

    /// The standard reason phrase, or `"Unknown"`.
    public var reasonPhrase: String {
        switch code {
        case 100: "Continue"
        case 101: "Switching Protocols"
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 206: "Partial Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 410: "Gone"
        case 412: "Precondition Failed"
        case 413: "Payload Too Large"
        case 414: "URI Too Long"
        case 415: "Unsupported Media Type"
        case 422: "Unprocessable Content"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        default: "Unknown"
        }
    }

    /// `200 OK`.
    public var description: String { "\(code) \(reasonPhrase)" }
}
