import Foundation

/// One `ferry_cue` notification: rows of `table` changed for one user (or, for a
/// `shared` table, for everyone), written by `origin` (nil for SQL outside Ferry) in
/// transaction `xid`.
///
/// The payload, made by `ferry.send_cues` (sql/ferry/functions/cues.sql), is
/// `<owner uuid|*> <device|->@<xid> <table>`: the table comes last so its name may hold
/// anything, and it stays ~100 bytes whatever the statement touched. The xid rides after
/// the device's last `@`, where a gateway of the previous version, which reads
/// `<owner> <device> <table>`, takes it for part of the origin and still delivers the cue;
/// a payload without it (that version's SQL, a hand-sent NOTIFY) is read as well.
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
    /// The writing transaction, when the payload names it: a cursor whose snapshot makes
    /// it visible has seen the change (``SharedChangeCache``).
    var xid: UInt64?
    /// When the listener received it (``MonotonicClock`` nanoseconds), for the latency histogram.
    var receivedAt: UInt64 = 0

    init(audience: Audience, origin: String?, table: String, xid: UInt64? = nil, receivedAt: UInt64 = 0) {
        self.audience = audience
        self.origin = origin
        self.table = table
        self.xid = xid
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
        var device = parts[1]
        xid = nil
        if let at = device.lastIndex(of: "@"), let xid = PostgresSnapshot.xid(device[device.index(after: at)...].utf8) {
            self.xid = xid
            device = device[..<at]
        }
        origin = device == "-" || device.isEmpty ? nil : String(device)
        table = String(parts[2])
        self.receivedAt = receivedAt
    }
}
