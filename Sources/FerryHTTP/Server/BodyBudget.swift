import Synchronization

/// The one bound on request body bytes a server holds, over all its connections and
/// loops (``HTTPLimits/maxBufferedBodyBytes``).
///
/// A body is charged when its head is complete (its `Content-Length`) or as its chunks
/// arrive (chunked), and given back when its answer is written or its connection
/// closes: the bytes held while a body arrives and while its handler works on it. A
/// request that would take the total over the bound is refused `503 unavailable` with
/// `Retry-After` before more of its body is read, so memory never grows with the
/// number of clients sending bodies at once. Safe from any thread.
final class BodyBudget: Sendable {
    /// The most bytes charged at once.
    let limit: Int
    private let charged = Atomic<Int>(0)

    init(limit: Int) {
        precondition(limit >= 0, "a body budget cannot be negative")
        self.limit = limit
    }

    /// Bytes charged now, on every connection.
    var used: Int { charged.load(ordering: .relaxed) }

    /// Charges `bytes` if the total stays within ``limit``; false (nothing charged) when not.
    func reserve(_ bytes: Int) -> Bool {
        guard bytes > 0 else { return true }
        var current = charged.load(ordering: .relaxed)
        while true {
            guard current + bytes <= limit else { return false }
            let (exchanged, original) = charged.compareExchange(
                expected: current, desired: current + bytes, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
    }

    /// Gives back `bytes` charged by ``reserve(_:)``.
    func release(_ bytes: Int) {
        guard bytes > 0 else { return }
        let after = charged.subtract(bytes, ordering: .relaxed).newValue
        precondition(after >= 0, "released more body bytes than were charged")
    }
}
