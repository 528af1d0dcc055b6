/// One HTTP request, head and whole body, as a handler receives it.
///
/// The body is read completely (up to ``HTTPLimits/maxBodyBytes``) before the handler
/// runs. The value is self-contained: it may be kept or sent to another thread.
public struct HTTPRequest: Sendable {
    /// The request method.
    public var method: HTTPMethod
    /// The path as sent, before `?`, not percent-decoded (`/v1/locks/active_game/current/claim`).
    /// From the wire it is UTF-8 as sent: the decoder refuses a target that is not.
    public var path: String
    /// The query string after `?` (without it), not decoded; nil when the target has no `?`.
    /// Read parameters with ``queryParameter(_:)``.
    public var query: String?
    /// The header fields in the order received.
    public var headers: HTTPHeaders
    /// The body bytes (de-chunked); empty when there is none.
    public var body: [UInt8]
    /// Values of the route's `:name` segments, percent-decoded; filled in by the ``Router``.
    /// A segment that does not decode never reaches a handler: the server answers `400
    /// invalid_request` (``Router/Match/undecodable(parameter:pattern:)``).
    public var pathParameters: [String: String]
    /// Who sent the request: the TCP peer, or the client a trusted proxy named
    /// (``TrustedProxies``); nil if the socket could not tell.
    public var remoteAddress: ClientAddress?
    /// Whether the client asked to keep the connection open after this request.
    public var keepAlive: Bool
    /// Whether the request asked for a protocol upgrade (`Connection: upgrade`).
    ///
    /// Nothing after such a request is parsed as HTTP: a handler either takes the
    /// connection over (``HTTPResponder/takeOver(_:)``) or answers and the connection closes.
    public var isUpgrade: Bool

    /// Creates a request; the server builds them from the wire, tests may build their own.
    public init(
        method: HTTPMethod, path: String, query: String? = nil, headers: HTTPHeaders = HTTPHeaders(),
        body: [UInt8] = [], pathParameters: [String: String] = [:], remoteAddress: ClientAddress? = nil,
        keepAlive: Bool = true, isUpgrade: Bool = false
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.pathParameters = pathParameters
        self.remoteAddress = remoteAddress
        self.keepAlive = keepAlive
        self.isUpgrade = isUpgrade
    }

    /// The first value of query parameter `name`, percent-decoded, or nil when the
    /// query has no parameter of that name.
    ///
    /// Query strings are form-encoded: `+` is a space (a literal plus is `%2B`). A value
    /// that does not decode (a malformed `%` escape, bytes that are not UTF-8 once
    /// decoded, or a NUL) throws: present but unreadable, which the caller answers
    /// `400`. A parameter whose name does not decode names nothing and is skipped. A
    /// parameter without `=` has the empty value. Scans the query string on each call:
    /// cheap for the few parameters Ferry's endpoints take.
    public func queryParameter(_ name: String) throws(URLDecodingError) -> String? {
        guard let query else { return nil }
        for pair in query.utf8.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let equals = pair.firstIndex(of: UInt8(ascii: "="))
            let rawName = pair[..<(equals ?? pair.endIndex)]
            guard let decodedName = PercentDecoding.decode(rawName, plusIsSpace: true), decodedName == name else {
                continue
            }
            guard let equals else { return "" }
            guard let value = PercentDecoding.decode(pair[pair.index(after: equals)...], plusIsSpace: true) else {
                throw URLDecodingError(name: name)
            }
            return value
        }
        return nil
    }
}

/// A query parameter or path segment that is present but does not percent-decode to
/// text: a malformed `%` escape, bytes that are not UTF-8 once decoded, or a NUL
/// (which PostgreSQL's text cannot hold and C strings would cut at).
public struct URLDecodingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The query parameter's or the route's path parameter's name.
    public let name: String

    /// Names what did not decode.
    public init(name: String) { self.name = name }

    public var description: String { "\(name) is not percent-encoded UTF-8 text without NUL" }
}

/// Percent-decoding of URL components: the one place a path segment or a query
/// parameter becomes text.
enum PercentDecoding {
    /// Decodes `%XX` escapes (and `+` as a space when `plusIsSpace`); nil for a malformed
    /// escape, bytes that are not UTF-8, or a NUL, sent raw or as `%00`.
    static func decode<Bytes: Collection<UInt8>>(_ bytes: Bytes, plusIsSpace: Bool) -> String? {
        if !bytes.contains(where: { $0 == UInt8(ascii: "%") || $0 == 0 || (plusIsSpace && $0 == UInt8(ascii: "+")) }) {
            return String(validating: bytes, as: UTF8.self)
        }
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index != bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                let high = bytes.index(after: index)
                guard high != bytes.endIndex else { return nil }
                let low = bytes.index(after: high)
                guard low != bytes.endIndex, let h = hexValue(bytes[high]), let l = hexValue(bytes[low]) else {
                    return nil
                }
                decoded.append(h << 4 | l)
                index = bytes.index(after: low)
                continue
            }
            decoded.append(plusIsSpace && byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
            index = bytes.index(after: index)
        }
        guard !decoded.contains(0) else { return nil }
        return String(validating: decoded, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
