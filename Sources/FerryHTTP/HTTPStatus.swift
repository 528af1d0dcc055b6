/// An HTTP status code with its reason phrase.
public struct HTTPStatus: RawRepresentable, Hashable, Sendable, ExpressibleByIntegerLiteral, CustomStringConvertible {
    /// The three-digit code.
    public var code: Int
    public var rawValue: Int { code }

    /// Wraps any code from 100 to 999.
    public init(code: Int) {
        precondition((100...999).contains(code), "an HTTP status has three digits")
        self.code = code
    }

    public init(rawValue: Int) { self.init(code: rawValue) }
    public init(integerLiteral value: Int) { self.init(code: value) }

    public static let `continue`: HTTPStatus = 100
    public static let switchingProtocols: HTTPStatus = 101
    public static let ok: HTTPStatus = 200
    public static let created: HTTPStatus = 201
    public static let accepted: HTTPStatus = 202
    public static let noContent: HTTPStatus = 204
    public static let notModified: HTTPStatus = 304
    public static let badRequest: HTTPStatus = 400
    public static let unauthorized: HTTPStatus = 401
    public static let forbidden: HTTPStatus = 403
    public static let notFound: HTTPStatus = 404
    public static let methodNotAllowed: HTTPStatus = 405
    public static let requestTimeout: HTTPStatus = 408
    public static let conflict: HTTPStatus = 409
    public static let payloadTooLarge: HTTPStatus = 413
    public static let uriTooLong: HTTPStatus = 414
    public static let tooManyRequests: HTTPStatus = 429
    public static let headersTooLarge: HTTPStatus = 431
    public static let internalServerError: HTTPStatus = 500
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

    public var description: String { "\(code) \(reasonPhrase)" }
}
