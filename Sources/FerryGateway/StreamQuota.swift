import Foundation
import Synchronization

/// How many streams each user holds open on this process, across its loops, so one
/// user (or one leaked token) cannot hold an unbounded number of sockets. Any thread.
final class StreamQuota: Sendable {
    /// Streams one user may hold open on this process.
    let perUser: Int
    private let open = Mutex<[UUID: Int]>([:])

    init(perUser: Int) {
        self.perUser = perUser
    }

    /// Counts a stream for `user`; false (nothing counted) when the user is at the limit.
    func take(_ user: UUID) -> Bool {
        open.withLock { open in
            let count = open[user, default: 0]
            guard count < perUser else { return false }
            open[user] = count + 1
            return true
        }
    }

    /// Gives back a stream counted by ``take(_:)``.
    func release(_ user: UUID) {
        open.withLock { open in
            let count = open[user, default: 0] - 1
            open[user] = count > 0 ? count : nil
        }
    }
}
