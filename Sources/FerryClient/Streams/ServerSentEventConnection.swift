import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `GET /v1/events` read through `URLSessionDataDelegate`, the one streaming path
/// URLSession has on every platform (Linux has no `bytes(for:)`): each chunk goes
/// through a ``ServerSentEventParser`` and its messages are reported at once.
///
/// A refusal (any status but `200 text/event-stream`) is reported with its status,
/// `error.code` and `Retry-After`, read from at most 4 KiB of its body.
final class ServerSentEventConnection: NSObject, URLSessionDataDelegate, CueStreamConnection, @unchecked Sendable {
    // Sendable because the mutable state is confined: `parser`, `status`, `isStream`,
    // `refusalBody`, `retryAfter` and `hasEnded` are read and written only by the
    // delegate methods, which the session calls one at a time on its serial queue
    // (`cueStreamSession`); `session` and `task` are set before `start()` hands the
    // object to anyone and never change; `finish` is itself Sendable.
    private static let refusalBodyLimit = 4096

    private let report: @Sendable (CueStreamConnectionEvent) -> Void
    private var session: URLSession!
    private var task: URLSessionDataTask!
    private let finish = FinishSignal()

    private var parser = ServerSentEventParser()
    private var status = 0
    private var isStream = false
    private var refusalBody = Data()
    private var retryAfter: Duration?
    private var hasEnded = false

    /// A connection to `url` (the gateway's `/v1/events`) with `token`; `report` gets
    /// what happens, in order, from the session's queue.
    init(
        url: URL, token: String, openTimeout: Duration, idleTimeout: Duration,
        report: @escaping @Sendable (CueStreamConnectionEvent) -> Void
    ) {
        self.report = report
        super.init()
        var request = cueStreamRequest(url, token: token, timeout: max(openTimeout, idleTimeout))
        request.setValue("text/event-stream", forHTTPHeaderField: "Accept")
        session = cueStreamSession(delegate: self, idleTimeout: idleTimeout)
        task = session.dataTask(with: request)
    }

    func start() { task.resume() }

    func close() {
        task.cancel()
        session.invalidateAndCancel()
    }

    func sendAuth(_ token: String) {}

    func sendPing() {}

    func finished(timeout: Duration) async { await finish.wait(timeout: timeout) }

    var isAlive: Bool { !finish.isDone }

    // MARK: - URLSessionDataDelegate (on the session's serial queue)

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        let http = response as? HTTPURLResponse
        status = http?.statusCode ?? 0
        let type = http?.value(forHTTPHeaderField: "Content-Type")?.lowercased() ?? ""
        isStream = status == 200 && type.hasPrefix("text/event-stream")
        if let value = http?.value(forHTTPHeaderField: "Retry-After"), let seconds = Int(value), seconds >= 0 {
            retryAfter = .seconds(min(seconds, 86_400))
        }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard !hasEnded else { return }
        guard isStream else {
            refusalBody.append(data.prefix(max(0, Self.refusalBodyLimit - refusalBody.count)))
            return
        }
        do {
            let events = try parser.parse(data)
            report(.received(events.map { CueStreamMessage(json: $0.data, eventType: $0.type) }))
        } catch {
            end(.failed(error.description))
            close()
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        if status != 0 && status != 200 {
            end(.refused(status: status, code: Self.errorCode(refusalBody), retryAfter: retryAfter))
        } else if let error {
            end(.failed(error.localizedDescription))
        } else {
            end(.failed(isStream ? "the server ended the stream" : "not an event stream"))
        }
        session.finishTasksAndInvalidate()
    }

    func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
        finish.fire()
    }

    private func end(_ ending: CueStreamStateMachine.Ending) {
        guard !hasEnded else { return }
        hasEnded = true
        report(.ended(ending))
    }

    /// `error.code` of a PROTOCOL error body, if it is one.
    private static func errorCode(_ body: Data) -> String? {
        guard let json = try? JSONValue(json: body) else { return nil }
        return (try? WireDecoder.decode(ErrorBody.self, from: json))?.error.code
    }
}
