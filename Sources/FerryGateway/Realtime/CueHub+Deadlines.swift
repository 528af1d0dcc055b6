import FerryAuth
import Foundation

// The per-stream timing policy of PROTOCOL.md's stream lifecycle: a stream's token
// expiry and `token_expiring` warning, its heartbeats, and the close of a stream that
// takes nothing (`4008 too_slow`). Each stream has one deadline in the hub's wheel.

extension CueHub {
    /// Visits every stream whose deadline the loop's timer has reached.
    func tick() {
        for (subscriber, _) in wheel.advance(to: loop.now) { checkDeadlines(subscriber) }
    }

    /// Does whatever is due for `subscriber` (expiry, the token warning, a heartbeat)
    /// and schedules its next deadline.
    func checkDeadlines(_ subscriber: StreamSubscriber) {
        guard !subscriber.isClosing else { return }
        let now = loop.now
        let wallMilliseconds = Int(Date().timeIntervalSince1970 * 1000)
        // Saturating: the end is a client's token's, bounded by the token check but checked here too.
        let expiresInMilliseconds = subscriber.expiresAt.saturatingMultiply(1000).saturatingAdd(-wallMilliseconds)
        if expiresInMilliseconds <= 0 { return close(subscriber, .tokenExpired) }
        let warningMilliseconds = policy.tokenWarningSeconds * 1000
        if !subscriber.hasWarned && expiresInMilliseconds <= warningMilliseconds {
            subscriber.hasWarned = true
            subscriber.stream.send(
                type: "token_expiring", json: StreamMessage.tokenExpiring(inMilliseconds: expiresInMilliseconds))
        }
        if now >= subscriber.nextHeartbeat {
            subscriber.nextHeartbeat = now + UInt64(policy.heartbeatMilliseconds)
            let stalled = subscriber.stream.unsentBytes > 0
            // Bytes waiting at two heartbeats in a row, nothing taken in between: the
            // client reads nothing (or is gone).
            if stalled && subscriber.stalledAtLastHeartbeat && !subscriber.drainedSinceHeartbeat {
                return close(subscriber, .tooSlow)
            }
            subscriber.stalledAtLastHeartbeat = stalled
            subscriber.drainedSinceHeartbeat = false
            // A WebSocket that did not answer the previous ping is gone.
            if !stalled && !subscriber.stream.heartbeat() { return close(subscriber, .tooSlow) }
        }
        let expiry = now + UInt64(expiresInMilliseconds)
        var deadline = min(subscriber.nextHeartbeat, expiry)
        if !subscriber.hasWarned {
            deadline = min(deadline, now + UInt64(expiresInMilliseconds - warningMilliseconds))
        }
        wheel.schedule(subscriber, at: deadline)
    }
}
