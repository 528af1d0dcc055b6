import CHTTPParser

/// http-parser (`HTTP_REQUEST` mode) behind a small Swift type.
///
/// The C callbacks only record what they saw: URL bytes, header names and values
/// (each may arrive split across several callbacks and reads), body bytes, and the
/// facts http-parser knows at the end of the head. Everything that decides what the
/// bytes mean happens in ``HTTPRequestDecoder`` after `http_parser_execute` returns.
///
/// The parser pauses itself after each complete message, so one `execute` yields at
/// most one request and the caller chooses whether to go on (pipelining bound).
/// A callback also halts the parser when a limit is crossed, so an oversized part is
/// never buffered, and when the head is refused (``HeadAdmission``): the route's head
/// check, the body budget, or a target that is not UTF-8, so no byte of such a
/// request's body is buffered.
///
/// A class because the C parser must not move and reaches its owner through
/// `parser.data` (unretained: the parser is owned by this object). One connection, one loop.
final class HTTPParser {
    /// Which limit a callback saw crossed.
    enum LimitExceeded { case url, headers, body }

    /// Why a callback halted the parser on a request within the limits.
    enum Refusal {
        /// The request target is not UTF-8 (http-parser lets bytes over 0x7F through).
        case targetNotUTF8
        /// The route's head check answered instead of the handler.
        case headCheck(HTTPResponse)
        /// The body would take the server's body bytes over its budget.
        case bodyBuffer
    }

    /// Where the current message is.
    enum Progress: Equatable {
        /// No byte of a message yet (start of connection or after a complete message).
        case idle
        /// Inside the request line or headers.
        case head
        /// Head complete; body bytes (if any) are arriving.
        case body
    }

    private let parser: UnsafeMutablePointer<http_parser>
    private let limits: HTTPLimits
    /// What heads must pass; its ``HeadAdmission/client`` is set once a PROXY header named it.
    var admission: HeadAdmission
    /// The most body bytes reserved from `Content-Length` before they arrive: the
    /// declared length is the client's word, so a bigger body grows as it comes.
    static let maximumBodyReservation = 64 << 10

    // MARK: - What the callbacks recorded

    private(set) var progress = Progress.idle
    /// The request target so far.
    private(set) var url: [UInt8] = []
    /// Completed header fields.
    private(set) var headers = HTTPHeaders()
    private var fieldName: [UInt8] = []
    private var fieldValue: [UInt8] = []
    private var inValue = false
    private var headerBytes = 0
    /// The body so far.
    private(set) var body: [UInt8] = []
    /// Set by `on_headers_complete`: facts only valid while that message's flags are current.
    private(set) var method = HTTPMethod.get
    private(set) var keepAlive = true
    private(set) var isHTTP10 = false
    private(set) var isHTTP1 = true
    private(set) var isUpgrade = false
    private(set) var expectsContinue = false
    /// Who sent the message (``TrustedProxies/client(of:headers:)``), set when its head is complete.
    private(set) var client: ClientAddress?
    /// Set by `on_message_complete`; cleared by ``takeMessage()``.
    private(set) var messageComplete = false
    /// Set by a callback that halted the parser because a limit was crossed.
    private(set) var limitExceeded: LimitExceeded?
    /// Set by a callback that halted the parser because the head was refused.
    private(set) var refusal: Refusal?
    /// Bytes of the current message's body charged to the budget (``HeadAdmission/budget``):
    /// its `Content-Length`, or its chunks so far.
    private(set) var chargedBytes = 0
    private var lengthCharged = false
    /// The path limit of the message being read (set when its head is complete), or nil
    /// when ``HTTPLimits/maxBodyBytes`` applies.
    private(set) var pathBodyLimit: PathBodyLimit?
    private var maxBodyBytes: Int

    init(limits: HTTPLimits, admission: HeadAdmission = .none) {
        self.limits = limits
        self.admission = admission
        maxBodyBytes = limits.maxBodyBytes
        parser = .allocate(capacity: 1)
        http_parser_init(parser, HTTP_REQUEST)
        url.reserveCapacity(64)
        fieldName.reserveCapacity(32)
        fieldValue.reserveCapacity(64)
        parser.pointee.data = Unmanaged.passUnretained(self).toOpaque()
    }

    deinit { parser.deallocate() }

    // MARK: - Running

    /// Parses `bytes` until they run out, a message completes (the parser pauses) or an
    /// error. Returns the bytes consumed; what was seen is in the recorded properties.
    func execute(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return 0 }
        return http_parser_execute(parser, HTTPParser.settings, base.assumingMemoryBound(to: CChar.self), bytes.count)
    }

    /// http-parser's error, `HPE_OK` when none; `HPE_PAUSED` after a complete message.
    var errno: http_errno { http_errno(rawValue: parser.pointee.http_errno) }

    /// http-parser's description of its error.
    var errorDescription: String { String(cString: http_errno_description(errno)) }

    /// Lets a paused parser go on with the next message.
    func resume() {
        if errno == HPE_PAUSED { http_parser_pause(parser, 0) }
    }

    /// Hands out the finished message's parts and resets for the next message. The
    /// body's charge (``chargedBytes``) goes with it: the caller releases it.
    func takeMessage() -> (url: [UInt8], headers: HTTPHeaders, body: [UInt8], charged: Int) {
        precondition(messageComplete, "takeMessage before on_message_complete")
        messageComplete = false
        let charged = chargedBytes
        defer {
            // The URL buffer is reused (its bytes become Strings); headers and body
            // move out with the request, so fresh ones are needed anyway.
            url.removeAll(keepingCapacity: true)
            headers = HTTPHeaders()
            body = []
            headerBytes = 0
            inValue = false
            expectsContinue = false
            isUpgrade = false
            pathBodyLimit = nil
            maxBodyBytes = limits.maxBodyBytes
            chargedBytes = 0
            lengthCharged = false
        }
        return (url, headers, body, charged)
    }

    /// Gives back what the current message's body was charged: the message will never
    /// complete (refused, timed out, or its connection closed).
    func releaseCharge() {
        admission.budget?.release(chargedBytes)
        chargedBytes = 0
    }

    /// Gives back a charge ``takeMessage()`` handed out.
    func release(_ charged: Int) { admission.budget?.release(charged) }

    /// The path and query of a request target, or nil when it is not UTF-8. Origin-form
    /// targets only; a fragment is never sent but is dropped if it is.
    static func split(target url: [UInt8]) -> (path: String, query: String?)? {
        if url.contains(where: { $0 >= 0x80 }) && String(validating: url, as: UTF8.self) == nil { return nil }
        var end = url.endIndex
        if let hash = url.firstIndex(of: UInt8(ascii: "#")) { end = hash }
        let question = url[..<end].firstIndex(of: UInt8(ascii: "?"))
        let path = String(decoding: url[..<(question ?? end)], as: UTF8.self)
        let query = question.map { String(decoding: url[($0 + 1)..<end], as: UTF8.self) }
        return (path, query)
    }

    // MARK: - Recording (called from the C callbacks)

    private func messageBegan() {
        progress = .head
    }

    private func recordURL(_ bytes: UnsafeRawBufferPointer) -> Int32 {
        guard url.count + bytes.count <= limits.maxURLBytes else {
            limitExceeded = .url
            return 1
        }
        url.append(contentsOf: bytes)
        return 0
    }

    private func recordHeaderName(_ bytes: UnsafeRawBufferPointer) -> Int32 {
        // Trailers (after a chunked body) count toward the limit and are dropped: merged
        // into the head they would pass for headers, and one left unfinished would run
        // into the next request's first header.
        guard progress != .body else { return countHeaderBytes(bytes.count) }
        if inValue { finishField() }
        if fieldName.isEmpty && headers.count >= limits.maxHeaderFields {
            limitExceeded = .headers
            return 1
        }
        fieldName.append(contentsOf: bytes)
        return countHeaderBytes(bytes.count)
    }

    private func recordHeaderValue(_ bytes: UnsafeRawBufferPointer) -> Int32 {
        guard progress != .body else { return countHeaderBytes(bytes.count) }
        inValue = true
        fieldValue.append(contentsOf: bytes)
        return countHeaderBytes(bytes.count)
    }

    private func countHeaderBytes(_ count: Int) -> Int32 {
        headerBytes += count
        guard headerBytes <= limits.maxHeaderBytes else {
            limitExceeded = .headers
            return 1
        }
        return 0
    }

    private func finishField() {
        let name = String(decoding: fieldName, as: UTF8.self)
        let value = String(decoding: fieldValue, as: UTF8.self)
        if !expectsContinue && name.equalsIgnoringASCIICase("expect") && value.equalsIgnoringASCIICase("100-continue") {
            expectsContinue = true
        }
        headers.add(name: name, value: value)
        fieldName.removeAll(keepingCapacity: true)
        fieldValue.removeAll(keepingCapacity: true)
        inValue = false
    }

    /// Returns what `on_headers_complete` must: 0 to go on, -1 to halt with an error.
    private func headersCompleted() -> Int32 {
        if inValue || !fieldName.isEmpty { finishField() }
        method = HTTPMethod(parserMethod: parser.pointee.method)
        keepAlive = http_should_keep_alive(parser) != 0
        isHTTP1 = parser.pointee.http_major == 1
        isHTTP10 = isHTTP1 && parser.pointee.http_minor == 0
        isUpgrade = parser.pointee.upgrade == 1
        client = admission.trustedProxies.client(of: admission.client, headers: headers)
        progress = .body
        pathBodyLimit = limits.pathBodyLimit(forTarget: url)
        maxBodyBytes = pathBodyLimit?.maxBytes ?? limits.maxBodyBytes
        // content_length is ULLONG_MAX when the request has no Content-Length.
        let declared = parser.pointee.content_length
        let isChunked = parser.pointee.flags & UInt32(F_CHUNKED.rawValue) != 0
        if declared != UInt64.max {
            guard declared <= UInt64(maxBodyBytes) else {
                limitExceeded = .body
                return -1
            }
        }
        guard let target = Self.split(target: url) else {
            refusal = .targetNotUTF8
            return -1
        }
        let hasBody = isChunked || (declared != UInt64.max && declared > 0)
        if hasBody || expectsContinue, let check = admission.headCheck?(method, target.path) {
            let head = HTTPRequest(
                method: method, path: target.path, query: target.query, headers: headers,
                remoteAddress: client, keepAlive: keepAlive, isUpgrade: isUpgrade)
            if let response = check(head) {
                refusal = .headCheck(response)
                return -1
            }
        }
        if declared != UInt64.max && declared > 0 {
            guard charge(Int(declared)) else { return -1 }
            lengthCharged = true
            body.reserveCapacity(Int(min(declared, UInt64(Self.maximumBodyReservation))))
        }
        return 0
    }

    /// Charges `bytes` more to the budget; false, with the refusal set, when it is full.
    private func charge(_ bytes: Int) -> Bool {
        guard let budget = admission.budget else { return true }
        guard budget.reserve(bytes) else {
            refusal = .bodyBuffer
            return false
        }
        chargedBytes += bytes
        return true
    }

    private func recordBody(_ bytes: UnsafeRawBufferPointer) -> Int32 {
        guard body.count + bytes.count <= maxBodyBytes else {
            limitExceeded = .body
            return 1
        }
        // A chunked body is charged as it comes; a body with a length was charged whole.
        if !lengthCharged && !charge(bytes.count) { return 1 }
        body.append(contentsOf: bytes)
        return 0
    }

    private func messageCompleted() {
        messageComplete = true
        progress = .idle
        // Stop after this message: the decoder decides whether the next one is read now.
        http_parser_pause(parser, 1)
    }

    // MARK: - C callbacks

    private static func owner(_ parser: UnsafeMutablePointer<http_parser>?) -> HTTPParser {
        Unmanaged<HTTPParser>.fromOpaque(parser!.pointee.data).takeUnretainedValue()
    }

    private static func buffer(_ at: UnsafePointer<CChar>?, _ length: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: at, count: length)
    }

    /// One settings struct for every parser: the callbacks capture nothing.
    /// Allocated once and never freed; http-parser only reads it.
    nonisolated(unsafe) private static let settings: UnsafeMutablePointer<http_parser_settings> = {
        let pointer = UnsafeMutablePointer<http_parser_settings>.allocate(capacity: 1)
        http_parser_settings_init(pointer)
        var settings = pointer.pointee
        settings.on_message_begin = { parser in
            owner(parser).messageBegan()
            return 0
        }
        settings.on_url = { parser, at, length in owner(parser).recordURL(buffer(at, length)) }
        settings.on_header_field = { parser, at, length in owner(parser).recordHeaderName(buffer(at, length)) }
        settings.on_header_value = { parser, at, length in owner(parser).recordHeaderValue(buffer(at, length)) }
        settings.on_headers_complete = { parser in owner(parser).headersCompleted() }
        settings.on_body = { parser, at, length in owner(parser).recordBody(buffer(at, length)) }
        settings.on_message_complete = { parser in
            owner(parser).messageCompleted()
            return 0
        }
        pointer.pointee = settings
        return pointer
    }()
}
