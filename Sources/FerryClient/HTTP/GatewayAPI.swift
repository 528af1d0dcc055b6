import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// An error answer of the gateway: `{"error": {"code", "message", "retryable"}}` and its status.
public struct ServerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The HTTP status.
    public var status: Int
    /// The protocol's error code (`token_expired`, `lock_held`, …).
    public var code: String
    /// The server's human text.
    public var message: String
    /// Whether sending the same request later may succeed (5xx, 429).
    public var retryable: Bool
    /// The whole error object, for the fields some codes add (`holder`, `device_rows`, …).
    public var details: FerryRow
    /// `Retry-After`, in seconds, when the answer had one.
    public var retryAfter: Double?

    public var description: String { "\(status) \(code): \(message)" }
}

/// What can go wrong in a FerryClient call.
public enum FerryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The server could not be reached (no network, refused, timed out, a lost answer).
    /// Nothing is lost: queued work stays queued and is retried.
    case unreachable(String)
    /// The server answered with an error.
    case server(ServerError)
    /// There is no session: the device signed out, or the server ended the session.
    case signedOut
    /// The stored session could not be read (a locked Keychain, an unreadable file).
    /// Nothing was discarded; try again later.
    case sessionUnreadable(String)
    /// Signing in needs the app's choice: this device's anonymous data, or the account's.
    case resolutionRequired(deviceRows: Int, cloudRows: Int)
    /// Another device holds the lock: the takeover prompt's data.
    case lockHeld(holder: String?, heartbeatAge: TimeInterval?)
    /// The lock was taken by another device (or released) since this one claimed it.
    case lockLost(holder: String?)
    /// The outbox could not be emptied before linking or signing in: some mutations
    /// are still pending (the server could not take them yet).
    case outboxNotEmpty(pending: Int)
    /// The local store refused (an unknown table, a missing key, a read-only table).
    case local(LocalStoreError)
    /// The server's answer did not follow the protocol.
    case invalidAnswer(String)
    /// A local file could not be written or read.
    case storage(String)

    public var description: String {
        switch self {
        case .unreachable(let reason): "the server could not be reached: \(reason)"
        case .server(let error): error.description
        case .signedOut: "signed out"
        case .sessionUnreadable(let reason): "the stored session could not be read: \(reason)"
        case .resolutionRequired(let device, let cloud):
            "sign-in needs a choice: \(device) rows on this device, \(cloud) in the account"
        case .lockHeld(let holder, let age):
            "the lock is held by device \(holder ?? "?")"
                + (age.map { String(format: " (heartbeat %.1f s ago)", $0) } ?? "")
        case .lockLost(let holder): "the lock was lost" + (holder.map { " to device \($0)" } ?? "")
        case .outboxNotEmpty(let pending): "\(pending) mutations are still waiting to be pushed"
        case .local(let error): error.description
        case .invalidAnswer(let reason): "the server's answer did not follow the protocol: \(reason)"
        case .storage(let reason): reason
        }
    }

    /// The server's error code, when the server answered with one.
    public var serverCode: String? { if case .server(let error) = self { error.code } else { nil } }

    /// Whether the same work may succeed later without any change (network, 5xx, 429).
    public var isRetryable: Bool {
        switch self {
        case .unreachable: true
        case .server(let error): error.retryable || error.status >= 500 || error.status == 429
        default: false
        }
    }
}

/// One answer of the gateway.
struct GatewayAnswer: Sendable {
    var status: Int
    var body: JSONValue?
    var retryAfter: Double?

    /// The answer as a ``ServerError`` (for a status that is not 2xx).
    var error: ServerError {
        let object = body?["error"]?.objectValue ?? [:]
        return ServerError(
            status: status, code: object["code"]?.stringValue ?? "http_\(status)",
            message: object["message"]?.stringValue ?? "HTTP \(status)",
            retryable: { if case .bool(let retryable)? = object["retryable"] { retryable } else { status >= 500 } }(),
            details: object, retryAfter: retryAfter)
    }
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
    func send(
        _ method: String, _ path: String, query: [(String, String)] = [], body: JSONValue? = nil, token: String? = nil
    ) async throws(FerryError) -> GatewayAnswer {
        guard var components = URLComponents(url: server, resolvingAgainstBaseURL: false) else {
            throw .invalidAnswer("bad server URL \(server)")
        }
        components.percentEncodedPath = components.percentEncodedPath.trimmingSuffix("/") + path
        if !query.isEmpty {
            components.percentEncodedQuery = query.map { "\($0.0)=\(Self.percentEncoded($0.1))" }.joined(separator: "&")
        }
        guard let url = components.url else { throw .invalidAnswer("bad URL for \(path)") }
        var request = URLRequest(url: url, timeoutInterval: timeout)
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
        let timeout = self.timeout
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
