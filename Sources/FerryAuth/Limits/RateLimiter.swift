import Foundation
import Synchronization

/// Counts requests per key (a client address, an email) in fixed windows and
/// refuses those over the limit, saying when to retry (`429 rate_limited` with
/// `Retry-After`).
///
/// One shared instance per process per limit: with `SO_REUSEPORT` one address's
/// requests land on any loop, so the state is behind one `Mutex` (a dictionary
/// lookup under it, no allocation for a known key). Memory is bounded: windows
/// that have ended are dropped lazily, oldest first, on each call; and when more
/// than `maxKeys` windows are live the oldest live window is dropped, which hands
/// that key a fresh allowance. That is the right failure under a flood of new
/// keys: refusing new keys instead would let an attacker with many addresses lock
/// out every address it has never seen.
public final class RateLimiter: Sendable {
    /// The answer for one request.
    public enum Decision: Sendable, Equatable {
        /// Under the limit; the request was counted.
        case allowed
        /// Over the limit; the window ends in this many whole seconds (at least 1).
        case denied(retryAfterSeconds: Int)
    }

    private struct Window {
        var start: Double
        var count: Int
    }

    private struct State {
        var windows: [String: Window] = [:]
        /// Every window start in the order it began (so oldest first), possibly with
        /// stale entries for keys whose window has since restarted.
        var starts: [(key: String, start: Double)] = []
        var head = 0
    }

    /// Requests allowed per key per window.
    public let limit: Int
    /// The window's length, seconds.
    public let windowSeconds: Int
    /// Keys tracked at most.
    public let maxKeys: Int
    private let clock: @Sendable () -> Double
    private let state = Mutex(State())

    /// A limiter of `limit` requests per `windowSeconds` per key, tracking at most
    /// `maxKeys` keys. `clock` gives seconds on any monotonic scale.
    public init(
        limit: Int, windowSeconds: Int, maxKeys: Int = 100_000,
        clock: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds
    ) {
        precondition(limit > 0 && windowSeconds > 0 && maxKeys > 0, "a rate limit needs positive numbers")
        self.limit = limit
        self.windowSeconds = windowSeconds
        self.maxKeys = maxKeys
        self.clock = clock
    }

    /// Seconds since boot, monotonic.
    public static func monotonicSeconds() -> Double {
        Double(DispatchTime.now().uptimeNanoseconds) / 1e9
    }

    /// Whether `key` has used up its window, without counting an attempt: for limits
    /// on failures, checked before the attempt and counted (``admit(_:)``) only when
    /// it fails.
    public func check(_ key: String) -> Decision {
        let now = clock()
        let window = Double(windowSeconds)
        return state.withLock { state in
            guard let current = state.windows[key], current.start + window > now, current.count >= limit else {
                return .allowed
            }
            return .denied(retryAfterSeconds: max(1, Int((current.start + window - now).rounded(.up))))
        }
    }

    /// Counts one request by `key` and says whether it may go ahead. Any thread.
    ///
    /// `cost` is what the request counts for (1: one request; a body's size: bytes). A
    /// request is admitted while the window's count is under the limit, whatever its own
    /// cost, so one request larger than the limit still goes, once per window.
    public func admit(_ key: String, cost: Int = 1) -> Decision {
        let now = clock()
        let window = Double(windowSeconds)
        return state.withLock { state in
            evictEnded(&state, now: now, window: window)
            if var current = state.windows[key] {
                guard current.count < limit else {
                    let remaining = current.start + window - now
                    return .denied(retryAfterSeconds: max(1, Int(remaining.rounded(.up))))
                }
                current.count = current.count.saturatingAdd(cost)
                state.windows[key] = current
                return .allowed
            }
            state.windows[key] = Window(start: now, count: cost)
            state.starts.append((key, now))
            while state.windows.count > maxKeys { evictOldest(&state) }
            return .allowed
        }
    }

    /// Keys with a live window. For metrics and tests.
    public var trackedKeys: Int {
        state.withLock { $0.windows.count }
    }

    private func evictEnded(_ state: inout State, now: Double, window: Double) {
        while state.head < state.starts.count, state.starts[state.head].start + window <= now {
            evictOldest(&state)
        }
    }

    /// Drops the oldest start, and its key's window when that is the window it began.
    private func evictOldest(_ state: inout State) {
        let (key, start) = state.starts[state.head]
        state.head += 1
        if state.windows[key]?.start == start { state.windows[key] = nil }
        if state.head >= 1024 && state.head * 2 >= state.starts.count {
            state.starts.removeFirst(state.head)
            state.head = 0
        }
    }
}
