import Synchronization

/// How many of something each key holds at once on this process, across its loops, with
/// a limit per key: streams per user, requests in flight per device and per user. Any
/// thread: with `SO_REUSEPORT` one key's connections land on any loop, so the counts are
/// behind one `Mutex`. A key is tracked only while it holds something, so memory follows
/// what is held, not how many keys were ever seen.
public final class ConcurrencyLimit<Key: Hashable & Sendable>: Sendable {
    /// What one key may hold at once.
    public let limit: Int
    private let held = Mutex<[Key: Int]>([:])

    /// A limit of `limit` held at once per key.
    public init(limit: Int) {
        precondition(limit > 0, "a concurrency limit needs a positive limit")
        self.limit = limit
    }

    /// Counts one for `key`; false (nothing counted) when the key is at the limit.
    public func take(_ key: Key) -> Bool {
        held.withLock { held in
            let count = held[key, default: 0]
            guard count < limit else { return false }
            held[key] = count + 1
            return true
        }
    }

    /// Gives back one counted by ``take(_:)``.
    public func release(_ key: Key) {
        held.withLock { held in
            let count = held[key, default: 0] - 1
            held[key] = count > 0 ? count : nil
        }
    }

    /// What `key` holds now. For tests.
    public func count(_ key: Key) -> Int {
        held.withLock { $0[key, default: 0] }
    }

    /// Keys holding anything now. For tests.
    public var keysHolding: Int {
        held.withLock { $0.count }
    }
}
