import Foundation

/// When a failed request is tried again, and after how long: the client's one answer,
/// used by the drain and pull, the session refresh and ``FerryError/isRetryable``.
///
/// Retryable: no answer at all, or an answer that says so (`retryable: true`), and any
/// 5xx or 429 whatever its body (a proxy's error page has none). The wait is full-jitter
/// exponential backoff, at least the server's `Retry-After`.
struct RetryPolicy: Sendable, Hashable {
    /// The first retry comes within this many seconds.
    var base: TimeInterval
    /// The most any wait may grow to, in seconds (before `Retry-After`).
    var cap: TimeInterval

    /// A policy whose first wait is below `base` seconds, doubling up to `cap`.
    init(base: TimeInterval = 0.5, cap: TimeInterval = 60) {
        self.base = base
        self.cap = cap
    }

    /// Whether an answer with `status` (and the body's `retryable`, when it had one) may
    /// succeed if sent again unchanged.
    static func isRetryable(status: Int, flag: Bool?) -> Bool {
        flag == true || status >= 500 || status == 429
    }

    /// The wait before the retry that follows `failures` failures in a row (0: the
    /// first): a random time up to `min(cap, base × 2^failures)`, and at least `retryAfter`.
    func delay(afterFailures failures: Int, retryAfter: TimeInterval? = nil) -> TimeInterval {
        let ceiling = min(cap, base * pow(2, Double(min(max(failures, 0), 30))))
        return max(Double.random(in: 0...max(ceiling, 0)), retryAfter ?? 0)
    }
}
