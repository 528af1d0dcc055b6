import CCurl
import FerryHTTP
import FerryLoop
import Foundation

/// Forwards an email-addressed request (sign-in, its check-only form, recovery) to the
/// gateways of the shard the email directory names (`FERRY_SHARD_URLS`,
/// docs/SCALING.md), with libcurl on worker threads of its own (never on an event loop),
/// and relays the answer: its status, body and `Retry-After`. Bounded: a timeout, an
/// answer size limit, a queue limit; a forwarded request carries ``forwardedHeader`` and
/// is never forwarded again. Safe from any thread.
final class ShardForwarder: Sendable {
    /// Set on every forwarded request; a gateway that sees it answers locally.
    static let forwardedHeader = "X-Ferry-Forwarded"
    /// With ``forwardedHeader``: check the sign-in's credentials only, answering the
    /// account's row count (``SignInAttempt``), for a first sign-in across shards.
    static let signInCheckHeader = "X-Ferry-Signin-Check"
    /// The most bytes of an answer relayed; a longer one is a failure.
    static let maxAnswerBytes = 64 * 1024

    /// Each shard's gateways' base URL, e.g. `http://10.0.1.5:8080`.
    let urls: [Int: String]
    let timeoutSeconds: Int
    private let workers: BlockingWorkerPool

    init(urls: [Int: String], timeoutSeconds: Int = 10, threads: Int = 4) {
        self.urls = urls
        self.timeoutSeconds = timeoutSeconds
        workers = BlockingWorkerPool(name: "ferry-forward", threads: threads, queueLimit: 256)
    }

    /// Runs libcurl's global set-up once (shared with the SMTP relay's).
    private static let curlIsReady: Bool = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK

    /// Posts `body` to `path` of `shard`'s gateways with `client` in `X-Forwarded-For`
    /// (and `checkOnly`, ``signInCheckHeader``); calls back on `loop` with the answer, or
    /// the `503` to send.
    func post(
        _ path: String, body: [UInt8], client: String?, checkOnly: Bool = false, to shard: Int, on loop: EventLoop,
        _ completion: @escaping @Sendable (HTTPResponse) -> Void
    ) {
        guard let base = urls[shard] else {
            return completion(Self.unreachable(shard, "no FERRY_SHARD_URLS entry").response)
        }
        let timeout = timeoutSeconds
        let accepted = workers.submit {
            let answer = Self.perform(
                url: base + path, body: body, client: client, checkOnly: checkOnly, timeoutSeconds: timeout)
            loop.execute {
                switch answer {
                case .success(let response): completion(response)
                case .failure(let failure): completion(Self.unreachable(shard, failure.reason).response)
                }
            }
        }
        if !accepted { completion(Self.unreachable(shard, "too many forwarded requests").response) }
    }

    func close() { workers.close() }

    static func unreachable(_ shard: Int, _ reason: String) -> APIError {
        APIError(
            status: 503, code: "shard_unavailable",
            message: "the shard of this account (\(shard)) did not answer; retry (\(reason))")
    }

    /// One POST, blocking.
    private static func perform(url: String, body: [UInt8], client: String?, checkOnly: Bool, timeoutSeconds: Int)
        -> Result<HTTPResponse, Failure>
    {
        guard curlIsReady, let curl = curl_easy_init() else {
            return .failure(Failure(reason: "libcurl could not start"))
        }
        defer { curl_easy_cleanup(curl) }
        var headers = curl_slist_append(nil, "Content-Type: application/json")
        headers = curl_slist_append(headers, "\(forwardedHeader): 1")
        if let client { headers = curl_slist_append(headers, "X-Forwarded-For: \(client)") }
        if checkOnly { headers = curl_slist_append(headers, "\(signInCheckHeader): 1") }
        headers = curl_slist_append(headers, "Expect:")
        defer { curl_slist_free_all(headers) }
        let sink = Sink()
        let sinkPointer = Unmanaged.passRetained(sink)
        defer { sinkPointer.release() }
        return body.withUnsafeBufferPointer { bodyBytes -> Result<HTTPResponse, Failure> in
            var status = ccurl_set_text(curl, CURLOPT_URL, url)
            let longs: [(CURLoption, Int)] = [
                (CURLOPT_POST, 1), (CURLOPT_POSTFIELDSIZE, bodyBytes.count), (CURLOPT_TIMEOUT, timeoutSeconds),
                (CURLOPT_CONNECTTIMEOUT, min(timeoutSeconds, 3)), (CURLOPT_NOSIGNAL, 1), (CURLOPT_FOLLOWLOCATION, 0),
            ]
            for (option, value) in longs where status == CURLE_OK { status = ccurl_set_long(curl, option, value) }
            if status == CURLE_OK {
                status = ccurl_set_pointer(
                    curl, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: bodyBytes.baseAddress ?? nil))
            }
            if status == CURLE_OK { status = ccurl_set_list(curl, CURLOPT_HTTPHEADER, headers) }
            if status == CURLE_OK { status = ccurl_set_write_function(curl, Sink.write) }
            if status == CURLE_OK { status = ccurl_set_pointer(curl, CURLOPT_WRITEDATA, sinkPointer.toOpaque()) }
            if status == CURLE_OK { status = ccurl_set_header_function(curl, Sink.header) }
            if status == CURLE_OK { status = ccurl_set_pointer(curl, CURLOPT_HEADERDATA, sinkPointer.toOpaque()) }
            if status == CURLE_OK { status = curl_easy_perform(curl) }
            guard status == CURLE_OK else {
                let reason = sink.tooLarge ? "answer too large" : String(cString: curl_easy_strerror(status))
                return .failure(Failure(reason: reason))
            }
            let code = ccurl_response_code(curl)
            guard (100...599).contains(code) else { return .failure(Failure(reason: "no HTTP status")) }
            var responseHeaders = HTTPHeaders()
            responseHeaders.add(name: "Content-Type", value: "application/json")
            if let retryAfter = sink.retryAfter { responseHeaders.add(name: "Retry-After", value: retryAfter) }
            return .success(HTTPResponse(status: HTTPStatus(code: code), headers: responseHeaders, body: sink.bytes))
        }
    }

    /// Why a forward failed, for the `503`'s message (never the URL).
    struct Failure: Error {
        let reason: String
    }

    /// The answer's bytes, up to ``maxAnswerBytes``, and its `Retry-After`.
    private final class Sink {
        var bytes: [UInt8] = []
        var tooLarge = false
        /// The last `Retry-After` seen, when it is delay-seconds (all the gateways send).
        var retryAfter: String?

        /// curl's header callback, once per header line (curl bounds a line's length).
        static let header: curl_write_callback = { data, size, count, context in
            guard let data, let context else { return 0 }
            let sink = Unmanaged<Sink>.fromOpaque(context).takeUnretainedValue()
            let length = size * count
            let line = data.withMemoryRebound(to: UInt8.self, capacity: length) { pointer in
                String(decoding: UnsafeBufferPointer(start: pointer, count: length), as: UTF8.self)
            }
            if let colon = line.firstIndex(of: ":"),
                line[..<colon].trimmingCharacters(in: .whitespaces).lowercased() == "retry-after"
            {
                let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
                if (1...9).contains(value.count), value.allSatisfy({ $0.isASCII && $0.isNumber }) {
                    sink.retryAfter = value
                }
            }
            return length
        }

        /// curl's write callback: a short count (0) stops the transfer.
        static let write: curl_write_callback = { data, size, count, context in
            guard let data, let context else { return 0 }
            let sink = Unmanaged<Sink>.fromOpaque(context).takeUnretainedValue()
            let length = size * count
            guard sink.bytes.count + length <= ShardForwarder.maxAnswerBytes else {
                sink.tooLarge = true
                return 0
            }
            data.withMemoryRebound(to: UInt8.self, capacity: length) { pointer in
                sink.bytes.append(contentsOf: UnsafeBufferPointer(start: pointer, count: length))
            }
            return length
        }
    }
}
