import FerryAuth
import FerryJSON
import Foundation

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
enum StreamCloseReason: Sendable, Equatable {
    case tokenExpired, sessionRevoked, accountDeleted, tooSlow, goingAway
    /// `1008`: the client broke the stream's rules (a bad in-band `auth`), as `text` says.
    case policyViolation(String)

    var code: UInt16 {
        switch self {
        case .tokenExpired: 4001
        case .sessionRevoked: 4003
        case .accountDeleted: 4004
        case .tooSlow: 4008
        case .goingAway: 1001
        case .policyViolation: 1008
        }
    }

    var text: String {
        switch self {
        case .tokenExpired: "token_expired"
        case .sessionRevoked: "session_revoked"
        case .accountDeleted: "account_deleted"
        case .tooSlow: "too_slow"
        case .goingAway: "going_away"
        case .policyViolation(let text): text
        }
    }
}
