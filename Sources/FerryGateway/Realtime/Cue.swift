import FerryAuth
import FerryHTTP
import FerryJSON
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

/// The messages of PROTOCOL.md's "Streams", as the one-line JSON both transports carry.
enum StreamMessage {
    /// `{"type":"hello","user_id","device_id","heartbeat_ms"}`.
    static func hello(userID: UUID, deviceID: String, heartbeatMilliseconds: Int) -> [UInt8] {
        var json = Array(#"{"type":"hello","user_id":""#.utf8)
        json += userID.lowercasedString.utf8
        json += #"","device_id":"#.utf8
        JSONString.append(deviceID, to: &json)
        json += #","heartbeat_ms":\#(heartbeatMilliseconds)}"#.utf8
        return json
    }

    /// `{"type":"cue","tables":[…],"origin":…}`. An empty `tables` means "anything may
    /// have changed" (sent after the listener was down).
    static func cue(tables: [String], origin: String?) -> [UInt8] {
        var json = Array(#"{"type":"cue","tables":["#.utf8)
        for (index, table) in tables.enumerated() {
            if index > 0 { json.append(UInt8(ascii: ",")) }
            JSONString.append(table, to: &json)
        }
        json += #"],"origin":"#.utf8
        if let origin {
            JSONString.append(origin, to: &json)
        } else {
            json += "null".utf8
        }
        json.append(UInt8(ascii: "}"))
        return json
    }

    /// `{"type":"token_expiring","in_ms"}`.
    static func tokenExpiring(inMilliseconds: Int) -> [UInt8] {
        Array(#"{"type":"token_expiring","in_ms":\#(inMilliseconds)}"#.utf8)
    }
}

/// How and why the gateway closes a stream: PROTOCOL.md's close codes.
enum StreamCloseReason: Sendable {
    case tokenExpired, sessionRevoked, accountDeleted, tooSlow, goingAway

    var code: UInt16 {
        switch self {
        case .tokenExpired: 4001
        case .sessionRevoked: 4003
        case .accountDeleted: 4004
        case .tooSlow: 4008
        case .goingAway: 1001
        }
    }

    var text: String {
        switch self {
        case .tokenExpired: "token_expired"
        case .sessionRevoked: "session_revoked"
        case .accountDeleted: "account_deleted"
        case .tooSlow: "too_slow"
        case .goingAway: "going_away"
        }
    }
}
