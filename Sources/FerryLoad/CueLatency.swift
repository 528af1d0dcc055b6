/// Pairs each write with the first cue (or notification) that follows it for the same
/// user, so commit → cue latency can be read off a run.
public enum CueLatency {
    /// A moment something happened for one user: a write sent, or a cue received.
    public struct Event: Equatable, Sendable {
        /// The user (its line in the token file).
        public var user: Int
        /// Monotonic nanoseconds.
        public var at: UInt64

        /// Creates an event.
        public init(user: Int, at: UInt64) {
            self.user = user
            self.at = at
        }
    }

    /// For every write, the milliseconds from the write to the first arrival for its
    /// user at or after it and before that user's next write, or nil when none came
    /// (lost, or coalesced into the next write's cue). Results follow `writes`' order.
    public static func match(writes: [Event], arrivals: [Event]) -> [Double?] {
        var arrivalsByUser: [Int: [UInt64]] = [:]
        for arrival in arrivals { arrivalsByUser[arrival.user, default: []].append(arrival.at) }
        for user in arrivalsByUser.keys { arrivalsByUser[user]!.sort() }
        var nextWrite = [UInt64](repeating: .max, count: writes.count)
        var laterWrite: [Int: UInt64] = [:]
        for (position, write) in writes.enumerated().sorted(by: { $0.element.at > $1.element.at }) {
            nextWrite[position] = laterWrite[write.user] ?? .max
            laterWrite[write.user] = write.at
        }
        return writes.enumerated().map { position, write in
            guard let times = arrivalsByUser[write.user] else { return nil }
            // The first arrival at or after the write (binary search).
            var low = 0
            var high = times.count
            while low < high {
                let middle = (low + high) / 2
                if times[middle] < write.at { low = middle + 1 } else { high = middle }
            }
            guard low < times.count, times[low] < nextWrite[position] else { return nil }
            return Double(times[low] - write.at) / 1_000_000
        }
    }
}
