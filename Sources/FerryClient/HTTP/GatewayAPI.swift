import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One answer of the gateway: its status and its body, parsed once.
struct GatewayAnswer: Sendable {
    var status: Int
    var body: JSONValue?
    var retryAfter: Double?

    /// The body as the wire type `T`; ``FerryError/invalidAnswer(_:)`` naming `what` when
    /// it has not the protocol's shape.
    func decode<T: Decodable>(_ type: T.Type, _ what: String) throws(FerryError) -> T {
        do { return try WireDecoder.decode(type, from: body ?? .null) } catch {
            throw .invalidAnswer("\(what) without the protocol's shape: \(error)")
        }
    }

    /// The answer as a ``ServerError`` (for a status that is not 2xx); a body that is no
    /// error object (a proxy's page) still gives the status.
    var error: ServerError {
        let body = try? WireDecoder.decode(ErrorBody.self, from: self.body ?? .null)
        return ServerError(
            status: status, code: body?.error.code ?? "http_\(status)",
            message: body?.error.message ?? "HTTP \(status)",
            retryable: RetryPolicy.isRetryable(status: status, flag: body?.error.retryable),
            details: self.body?["error"]?.objectValue ?? [:], retryAfter: retryAfter)
    }

    /// The error object's extra fields (`holder`, `device_rows`, …).
    var errorFields: ErrorBody.Error? { (try? WireDecoder.decode(ErrorBody.self, from: body ?? .null))?.error }
}

/// The gateway's HTTP API, one request at a time, each with a deadline.
///
/// Every request is bounded by `timeout` in all (URLSession's own timeout is an idle
/// timeout, so a server that trickles bytes could hold it forever): nothing waits on
/// the network without an end.
struct GatewayAPI: Sendable {
    let server: URL
    let timeout: TimeInterval
    private let session: URLSession

    init(server: URL, timeout: TimeInterval) {
        self.server = server
        self.timeout = timeout
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        configuration.httpMaximumConnectionsPerHost = 4
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        session = URLSession(configuration: configuration)
    }

    /// Sends `method path?query` with `body` as JSON and `token` as Bearer; any status is
    /// an answer, only a failure to get one throws (``FerryError/unreachable(_:)``).
    /// `deadline` shortens this request's bound below ``timeout``.
    func send(
        _ method: String, _ path: String, query: [(String, String)] = [], body: JSONValue? = nil, token: String? = nil,
        deadline: TimeInterval? = nil
    ) async throws(FerryError) -> GatewayAnswer {
        guard var components = URLComponents(url: server, resolvingAgainstBaseURL: false) else {
            throw .invalidAnswer("bad server URL \(server)")
        }
        components.percentEncodedPath = components.percentEncodedPath.trimmingSuffix("/") + path
        if !query.isEmpty {
            components.percentEncodedQuery = query.map { "\($0.0)=\(Self.percentEncoded($0.1))" }.joined(separator: "&")
        }
        guard let url = components.url else { throw .invalidAnswer("bad URL for \(path)") }
        var request = URLRequest(url: url, timeoutInterval: min(deadline ?? timeout, timeout))
        request.httpMethod = method
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let body {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(body.jsonText.utf8)
        }
        // The answer, or the deadline, whichever comes first; the deadline cancels the
        // URLSession task and does not wait for it to end. (A task group would: on Linux a
        // data task can outlive its cancellation, and the pass waiting on it would wedge.)
        let outcome = LockedValue<(task: URLSessionDataTask?, resume: CheckedContinuation<GatewayAnswer, any Error>?)>(
            (nil, nil))
        let finish: @Sendable (Result<GatewayAnswer, FerryError>) -> Void = { result in
            let (task, resume) = outcome.withLock { state in
                defer { state = (nil, nil) }
                return state
            }
            task?.cancel()
            resume?.resume(with: result.mapError { $0 })
        }
        let session = self.session
        let timeout = min(deadline ?? self.timeout, self.timeout)
        let sendable = request
        let deadline = Task {
            try? await Task.sleep(for: .seconds(timeout))
            if !Task.isCancelled { finish(.failure(.unreachable("no answer within \(Int(timeout)) s"))) }
        }
        defer { deadline.cancel() }
        let answer: GatewayAnswer
        do {
            answer = try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    let task = session.dataTask(with: sendable) { data, response, error in
                        guard let http = response as? HTTPURLResponse, error == nil else {
                            finish(.failure(.unreachable(error?.localizedDescription ?? "no HTTP answer")))
                            return
                        }
                        let body = (data ?? Data()).isEmpty ? nil : try? JSONValue(json: data ?? Data())
                        let retryAfter = http.value(forHTTPHeaderField: "Retry-After").flatMap { Double($0) }
                        finish(.success(GatewayAnswer(status: http.statusCode, body: body, retryAfter: retryAfter)))
                    }
                    outcome.withLock { $0 = (task, continuation) }
                    task.resume()
                }
            } onCancel: {
                finish(.failure(.unreachable("cancelled")))
            }
        } catch {
            throw (error as? FerryError) ?? .unreachable("\(error)")
        }
        return answer
    }

    /// `value` percent-encoded for a URL path segment or query value: everything but
    /// RFC 3986's unreserved characters.
    static func percentEncoded(_ value: String) -> String {
        var allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        allowed.insert(charactersIn: "-._~")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
    }
}
