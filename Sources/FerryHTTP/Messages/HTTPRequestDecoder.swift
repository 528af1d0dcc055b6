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
    /// The body would take the server over ``HTTPLimits/maxBufferedBodyBytes`` (`503
    /// unavailable`, `Retry-After: 1`).
    case bodyBufferFull
    /// The body did not arrive whole within the body timeout
    /// (``HTTPServerConfiguration/bodyTimeout``): `408 request_timeout`.
    case bodyTimeout

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
        case .bodyBufferFull:
            Self.retryLater(
                .error(
                    status: .serviceUnavailable, code: "unavailable",
                    message: "the server holds as many request bodies as it may: retry shortly"))
        case .bodyTimeout:
            .error(
                status: .requestTimeout, code: "request_timeout",
                message: "the request body did not arrive in time")
        }
    }

    private static func retryLater(_ response: HTTPResponse) -> HTTPResponse {
        var response = response
        response.headers.add(name: "Retry-After", value: "1")
        return response
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
        /// A complete request. The bytes after it (if any) were not consumed. `charged` is
        /// what its body holds of the budget: give it back (``release(_:)``) once answered.
        case request(HTTPRequest, isHTTP10: Bool, charged: Int)
        /// The bytes are not an acceptable request; nothing more can be decoded.
        case error(HTTPRequestError)
        /// The route's head check answered the request at its head (``HeadAdmission``);
        /// nothing more can be decoded.
        case refused(HTTPResponse)
    }

    private let parser: HTTPParser
    private var failed = false

    init(limits: HTTPLimits, admission: HeadAdmission = .none) {
        parser = HTTPParser(limits: limits, admission: admission)
    }

    /// Gives back a completed request's charge (``Event/request(_:isHTTP10:charged:)``).
    func release(_ charged: Int) { parser.release(charged) }

    /// The request being read will never complete (timed out, or its connection closed):
    /// gives back what its body holds of the budget.
    func abandon() { parser.releaseCharge() }

    /// Whom the connection's requests come from from now on (a trusted proxy's PROXY
    /// header named the client).
    func speak(for client: ClientAddress?) { parser.admission.client = client }

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
            let (request, charged) = makeRequest()
            return (consumed, .request(request, isHTTP10: parser.isHTTP10, charged: charged))
        default:
            failed = true
            parser.releaseCharge()
            switch parser.refusal {
            case .targetNotUTF8: return (consumed, .error(.malformed("the request target is not UTF-8")))
            case .headCheck(let response): return (consumed, .refused(response))
            case .bodyBuffer: return (consumed, .error(.bodyBufferFull))
            case nil: break
            }
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

    /// The request just completed, with its body's charge. Its target is UTF-8: the
    /// parser refused it at the head otherwise (the path must reach the router as sent).
    private func makeRequest() -> (HTTPRequest, charged: Int) {
        let isUpgrade = parser.isUpgrade
        let (url, headers, body, charged) = parser.takeMessage()
        let target = HTTPParser.split(target: url)!
        let request = HTTPRequest(
            method: parser.method, path: target.path, query: target.query, headers: headers, body: body,
            remoteAddress: parser.client, keepAlive: parser.keepAlive && !isUpgrade,
            isUpgrade: isUpgrade)
        return (request, charged)
    }
}
