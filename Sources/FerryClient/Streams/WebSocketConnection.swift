#if canImport(Darwin) && FERRY_CLIENT_WEBSOCKET
    import Foundation

    /// `GET /v1/stream` through `URLSessionWebSocketTask` (Apple platforms only: Linux's
    /// URLSession needs a libcurl with WebSocket, which Debian's lacks).
    ///
    /// Every received text message is one ``CueStreamMessage``; a close is reported with
    /// its code and reason (the reason decides: it names the code). URLSession answers the
    /// server's pings without showing them, so ``sendPing()`` sends the client's own and
    /// reports its pong as bytes received, which feeds the silence watchdog.
    ///
    /// Not compiled nor run on the project's Linux machines: unverified.
    final class WebSocketConnection: NSObject, URLSessionWebSocketDelegate, CueStreamConnection, @unchecked Sendable {
        // Sendable because `hasEnded` and `closeInfo` are touched only by the delegate
        // methods and the receive and pong callbacks, which the session runs one at a
        // time on its serial delegate queue (`cueStreamSession`); `session` and `task`
        // are set before `start()` and never change; `finish` is Sendable.
        private let report: @Sendable (CueStreamConnectionEvent) -> Void
        private var session: URLSession!
        private var task: URLSessionWebSocketTask!
        private let finish = FinishSignal()
        private var hasEnded = false

        init(
            url: URL, token: String, openTimeout: Duration, idleTimeout: Duration,
            report: @escaping @Sendable (CueStreamConnectionEvent) -> Void
        ) {
            self.report = report
            super.init()
            let request = cueStreamRequest(url, token: token, timeout: max(openTimeout, idleTimeout))
            session = cueStreamSession(delegate: self, idleTimeout: idleTimeout)
            task = session.webSocketTask(with: request)
            // The gateway's messages are about a hundred bytes; 64 KiB bounds a hostile one.
            task.maximumMessageSize = 64 * 1024
        }

        func start() {
            task.resume()
            receiveNext()
        }

        func close() {
            task.cancel(with: .normalClosure, reason: nil)
            session.invalidateAndCancel()
        }

        func sendAuth(_ token: String) {
            let object: [String: String] = ["type": "auth", "access_token": token]
            guard let data = try? JSONSerialization.data(withJSONObject: object) else { return }
            task.send(.string(String(decoding: data, as: UTF8.self))) { _ in }
        }

        func sendPing() {
            task.sendPing { [weak self] error in
                guard let self, error == nil else { return }
                self.session.delegateQueue.addOperation { self.deliver(.received([])) }
            }
        }

        func finished(timeout: Duration) async { await finish.wait(timeout: timeout) }

        var isAlive: Bool { !finish.isDone }

        private func receiveNext() {
            task.receive { [weak self] result in
                guard let self else { return }
                // Read into Sendable values here, then handled on the delegate queue
                // with the delegate methods, one at a time.
                let text: String?
                let failure: String?
                switch result {
                case .success(.string(let message)): (text, failure) = (message, nil)
                // The gateway sends text only; anything else is bytes, and ignored.
                case .success: (text, failure) = (nil, nil)
                case .failure(let error): (text, failure) = (nil, error.localizedDescription)
                }
                self.session.delegateQueue.addOperation {
                    if let failure {
                        self.endFromTask(failure)
                        return
                    }
                    self.deliver(.received(text.map { [CueStreamMessage(json: $0)] } ?? []))
                    self.receiveNext()
                }
            }
        }

        // MARK: - URLSessionWebSocketDelegate (on the session's serial queue)

        func urlSession(
            _ session: URLSession, webSocketTask: URLSessionWebSocketTask,
            didCloseWith closeCode: URLSessionWebSocketTask.CloseCode,
            reason: Data?
        ) {
            end(.closed(code: closeCode.rawValue, reason: reason.map { String(decoding: $0, as: UTF8.self) }))
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            endFromTask(error?.localizedDescription)
            session.finishTasksAndInvalidate()
        }

        func urlSession(_ session: URLSession, didBecomeInvalidWithError error: (any Error)?) {
            finish.fire()
        }

        /// The task failed or finished: a handshake refusal carries its HTTP status; a
        /// close the delegate did not see still has the task's close code and reason.
        private func endFromTask(_ error: String?) {
            if let response = task.response as? HTTPURLResponse, response.statusCode != 101 {
                let retryAfter = response.value(forHTTPHeaderField: "Retry-After").flatMap { Int($0) }
                end(
                    .refused(
                        status: response.statusCode, code: nil,
                        retryAfter: retryAfter.map { .seconds(min(max($0, 0), 86_400)) }))
            } else if task.closeCode != .invalid {
                end(
                    .closed(
                        code: task.closeCode.rawValue,
                        reason: task.closeReason.map { String(decoding: $0, as: UTF8.self) }
                    ))
            } else {
                end(.failed(error ?? "the server ended the stream"))
            }
        }

        private func deliver(_ event: CueStreamConnectionEvent) {
            guard !hasEnded else { return }
            report(event)
        }

        private func end(_ ending: CueStreamStateMachine.Ending) {
            guard !hasEnded else { return }
            hasEnded = true
            report(.ended(ending))
        }
    }
#endif
