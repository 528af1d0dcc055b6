import CHTTPParser

/// An HTTP request method.
///
/// The common methods are plain cases so that routing compares small integers, not
/// strings; anything else http-parser accepts arrives as ``other(_:)``.
public enum HTTPMethod: Hashable, Sendable, CustomStringConvertible {
    /// A method with a case of its own.
    case get, head, post, put, delete, patch, options, connect, trace
    /// A method without a case of its own (WebDAV and friends), by its name.
    case other(String)

    /// The method's name as sent on the wire (`GET`).
    public var name: String {
        switch self {
        case .get: "GET"
        case .head: "HEAD"
        case .post: "POST"
        case .put: "PUT"
        case .delete: "DELETE"
        case .patch: "PATCH"
        case .options: "OPTIONS"
        case .connect: "CONNECT"
        case .trace: "TRACE"
        case .other(let name): name
        }
    }

    /// The method's name.
    public var description: String { name }

    /// Maps http-parser's `enum http_method` value.
    init(parserMethod raw: UInt32) {
        switch http_method(rawValue: raw) {
        case HTTP_GET: self = .get
        case HTTP_HEAD: self = .head
        case HTTP_POST: self = .post
        case HTTP_PUT: self = .put
        case HTTP_DELETE: self = .delete
        case HTTP_PATCH: self = .patch
        case HTTP_OPTIONS: self = .options
        case HTTP_CONNECT: self = .connect
        case HTTP_TRACE: self = .trace
        default: self = .other(String(cString: http_method_str(http_method(rawValue: raw))))
        }
    }
}
