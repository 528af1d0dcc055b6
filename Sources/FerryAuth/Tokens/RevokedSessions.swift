import Foundation
import Synchronization

/// Sessions revoked in the last hour or so, checked on every authenticated
/// request without a database round trip.
///
/// One per process behind a `Mutex`: the hot path is one dictionary lookup under
/// an uncontended lock (tens of nanoseconds), from any loop. Per-loop copies fed
/// through ``EventLoop/execute(_:)`` would save the lock but cost a copy per
/// loop and a window in which one loop still accepts a token another refuses;
/// revocations are rare and the lookup is short, so one locked set is simpler and
/// as fast. An entry is kept until the last of its session's access tokens has
/// expired (`until`, see ``AccessTokenSigner/lastAcceptedSecond(issuedAt:)``),
/// after which the token check itself refuses them; ended entries are swept when
/// the set has doubled since the last sweep, so the work is amortized O(1).
public final class RevokedSessions: Sendable {
    private struct State {
        var until: [UUID: Int] = [:]
        var sweepAt = 1024
    }

    private let state = Mutex(State())
    private let clock: @Sendable () -> Int

    /// An empty set; `clock` gives seconds since 1970, the scale of token `exp`.
    public init(clock: @escaping @Sendable () -> Int = { Int(Date().timeIntervalSince1970) }) {
        self.clock = clock
    }

    /// Whether tokens of `sessionID` must be refused (`401 session_revoked`). Any thread.
    public func isRevoked(_ sessionID: UUID) -> Bool {
        guard let until = state.withLock({ $0.until[sessionID] }) else { return false }
        return clock() <= until
    }

    /// Refuses `sessionID`'s tokens until `until` (seconds since 1970) has passed. Any thread.
    public func revoke(_ sessionID: UUID, until: Int) {
        let now = clock()
        state.withLock { state in
            state.until[sessionID] = max(until, state.until[sessionID] ?? until)
            if state.until.count >= state.sweepAt {
                state.until = state.until.filter { $0.value >= now }
                state.sweepAt = max(1024, state.until.count * 2)
            }
        }
    }

    /// Replaces the whole set, e.g. with the database's list after the LISTEN
    /// connection reconnects (revocations announced while it was down were missed).
    public func replaceAll(with sessions: [(sessionID: UUID, until: Int)]) {
        let now = clock()
        var until: [UUID: Int] = [:]
        until.reserveCapacity(sessions.count)
        for session in sessions where session.until >= now {
            until[session.sessionID] = max(session.until, until[session.sessionID] ?? session.until)
        }
        state.withLock { state in
            state.until = until
            state.sweepAt = max(1024, until.count * 2)
        }
    }

    /// Entries held, ended or not. For metrics and tests.
    public var count: Int {
        state.withLock { $0.until.count }
    }
}
