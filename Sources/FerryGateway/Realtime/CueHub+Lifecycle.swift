import Foundation

// What each stream's ``StreamLifecycle`` asks for, done: its messages, its close, and its
// next deadline, one per stream in the hub's wheel.

extension CueHub {
    /// Now, on both clocks a stream's lifecycle reads: the loop's and the wall's.
    var instant: StreamLifecycle.Instant {
        StreamLifecycle.Instant(
            loopMilliseconds: loop.now, wallMilliseconds: Int(Date().timeIntervalSince1970 * 1000))
    }

    /// Visits every stream whose deadline the loop's timer has reached.
    func tick() {
        for (subscriber, _) in wheel.advance(to: loop.now) {
            let action = subscriber.lifecycle.deadlineReached(now: instant, unsentBytes: subscriber.stream.unsentBytes)
            perform(action, for: subscriber)
        }
    }

    /// Does what `subscriber`'s lifecycle asked for.
    func perform(_ action: StreamLifecycle.Action, for subscriber: StreamSubscriber) {
        switch action {
        case .none:
            return
        case .send(let messages, let deadline):
            guard write(messages, to: subscriber) else { return }
            wheel.schedule(subscriber, at: deadline)
        case .sendAndClose(let messages, let reason):
            guard write(messages, to: subscriber) else { return }
            close(subscriber, reason)
        case .close(let reason):
            close(subscriber, reason)
        }
    }

    /// Writes `messages`; false when a heartbeat found the client gone, and the stream
    /// is closing.
    private func write(_ messages: [StreamLifecycle.Message], to subscriber: StreamSubscriber) -> Bool {
        for message in messages {
            switch message {
            case .hello(let heartbeatMilliseconds):
                subscriber.stream.send(
                    type: "hello",
                    json: StreamMessage.hello(
                        userID: subscriber.userID, deviceID: subscriber.deviceID,
                        heartbeatMilliseconds: heartbeatMilliseconds))
            case .tokenExpiring(let inMilliseconds):
                subscriber.stream.send(
                    type: "token_expiring", json: StreamMessage.tokenExpiring(inMilliseconds: inMilliseconds))
            case .heartbeat:
                guard subscriber.stream.heartbeat() else {
                    perform(subscriber.lifecycle.heartbeatUnanswered(), for: subscriber)
                    return false
                }
            }
        }
        return true
    }
}
