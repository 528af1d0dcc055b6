import Foundation

/// One `ferry_cue` notification: rows of `table` changed for one user (or, for a
/// `shared` table, for everyone), written by `origin` (nil for SQL outside Ferry).
///
/// The payload, made by `ferry.send_cues` (sql/ferry/functions/cues.sql), is `<owner uuid|*> <device|-> <table>`: the
/// table comes last so its name may hold anything, and it stays ~100 bytes whatever
/// the statement touched.
struct Cue: Sendable, Equatable {
    /// Whom the change concerns.
    enum Audience: Sendable, Equatable {
        case user(UUID)
        /// A `shared` table: every stream.
        case everyone
    }

    var audience: Audience
    var origin: String?
    var table: String
    /// When the listener received it (``MonotonicClock`` nanoseconds), for the latency histogram.
    var receivedAt: UInt64 = 0

    init(audience: Audience, origin: String?, table: String, receivedAt: UInt64 = 0) {
        self.audience = audience
        self.origin = origin
        self.table = table
        self.receivedAt = receivedAt
    }

    /// Parses a `ferry_cue` payload; nil when it is not one.
    init?(payload: String, receivedAt: UInt64 = 0) {
        let parts = payload.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[2].isEmpty else { return nil }
        if parts[0] == "*" {
            audience = .everyone
        } else if let user = UUID(uuidString: String(parts[0])) {
            audience = .user(user)
        } else {
            return nil
        }
        origin = parts[1] == "-" ? nil : String(parts[1])
        table = String(parts[2])
        self.receivedAt = receivedAt
    }
}
