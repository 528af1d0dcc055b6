import CHTTPParser

/// Why a request was refused before it reached a handler, with its PROTOCOL.md answer.
public enum HTTPRequestError: Error, Equatable, Sendable {
    /// Not HTTP/1.x as http-parser understands it (`400 invalid_request`).
    case malformed(String)
    /// The body exceeds ``HTTPLimits/maxBodyBytes`` (`413 payload_too_large`).
    case payloadTooLarge
    /// The body exceeds its path's limit (``HTTPLimits/pathBodyLimits``): `413
    /// payload_too_large` with that limit's message.
    case payloadTooLargeForPath(message: String)
    /// The request target exceeds ``HTTPLimits/maxURLBytes`` (`414 uri_too_long`).
    case uriTooLong
    /// The header fields exceed ``HTTPLimits/maxHeaderBytes`` (`431 headers_too_large`).
    case headersTooLarge

    /// The error response the client gets before the connection closes.
    public var response: HTTPResponse {
        switch self {
        case .malformed(let reason):
            .error(status: .badRequest, code: "invalid_request", message: "malformed HTTP request: \(reason)")
        case .payloadTooLarge:
            .error(status: .payloadTooLarge, code: "payload_too_large", message: "request body is too large")
        case .payloadTooLargeForPath(let message):
            .error(status: .payloadTooLarge, code: "payload_too_large", message: message)
        case .uriTooLong:
            .error(status: .uriTooLong, code: "uri_too_long", message: "request URL is too long")
        case .headersTooLarge:
            .error(status: .headersTooLarge, code: "headers_too_large", message: "request headers are too large")
        }
    }
}

/// Turns bytes into ``HTTPRequest`` values, one at a time, enforcing ``HTTPLimits``.
///
/// A plain value wrapping ``HTTPParser`` (a class: copies share one parser, so keep a
/// decoder in one place). No sockets: feed it bytes, get back how many it took and what
/// it found. After an error the decoder is done; the connection answers and closes.
struct HTTPRequestDecoder {
    /// What one ``decode(_:)`` call found.
    enum Event {
        /// Every byte given was consumed; the message is not complete yet.
        case needMoreBytes
        /// A complete request. The bytes after it (if any) were not consumed.
        case request(HTTPRequest, isHTTP10: Bool)
        /// The bytes are not an acceptable request; nothing more can be decoded.
        case error(HTTPRequestError)
    }

    private let parser: HTTPParser
    private var failed = false

    init(limits: HTTPLimits) {
        parser = HTTPParser(limits: limits)
    }

    /// Where the message being decoded is (idle between messages).
    var progress: HTTPParser.Progress { parser.progress }

    /// Whether the request being read asked for `100 Continue` and its body has not started.
    var awaitsContinue: Bool { parser.progress == .body && parser.expectsContinue && parser.body.isEmpty }

    /// Decodes from the start of `bytes` until one request completes, the bytes run out
    /// or they turn out bad.
    mutating func decode(_ bytes: UnsafeRawBufferPointer) -> (consumed: Int, event: Event) {
        precondition(!failed, "decode after the decoder reported an error")
        let consumed = parser.execute(bytes)
        switch parser.errno {
        case HPE_OK:
            precondition(consumed == bytes.count, "http-parser stopped early without saying why")
            return (consumed, .needMoreBytes)
        case HPE_PAUSED:
            guard parser.isHTTP1 else {
                // http-parser reads any one-digit version; only HTTP/1.x is spoken here.
                failed = true
                return (consumed, .error(.malformed("unsupported HTTP version")))
            }
            parser.resume()
            guard let request = makeRequest() else {
                failed = true
                return (consumed, .error(.malformed("the request target is not UTF-8")))
            }
            return (consumed, .request(request, isHTTP10: parser.isHTTP10))
        default:
            failed = true
            switch parser.limitExceeded {
            case .url: return (consumed, .error(.uriTooLong))
            case .headers: return (consumed, .error(.headersTooLarge))
            case .body:
                if let limit = parser.pathBodyLimit {
                    return (consumed, .error(.payloadTooLargeForPath(message: limit.message)))
                }
                return (consumed, .error(.payloadTooLarge))
            case nil:
                if parser.errno == HPE_HEADER_OVERFLOW { return (consumed, .error(.headersTooLarge)) }
                return (consumed, .error(.malformed(parser.errorDescription)))
            }
        }
    }

    /// The request just completed; nil when its target is not UTF-8 (http-parser lets
    /// bytes over 0x7F through, and the path must reach the router as sent).
    private func makeRequest() -> HTTPRequest? {
        let isUpgrade = parser.isUpgrade
        let (url, headers, body) = parser.takeMessage()
        if url.contains(where: { $0 >= 0x80 }) && String(validating: url, as: UTF8.self) == nil { return nil }
        // Origin-form targets only; a fragment is never sent but is dropped if it is.
        var end = url.endIndex
        if let hash = url.firstIndex(of: UInt8(ascii: "#")) { end = hash }
        let question = url[..<end].firstIndex(of: UInt8(ascii: "?"))
        let path = String(decoding: url[..<(question ?? end)], as: UTF8.self)
        let query = question.map { String(decoding: url[($0 + 1)..<end], as: UTF8.self) }
        return HTTPRequest(
            method: parser.method, path: path, query: query, headers: headers, body: body,
            keepAlive: parser.keepAlive && !isUpgrade, isUpgrade: isUpgrade)
    }
}
