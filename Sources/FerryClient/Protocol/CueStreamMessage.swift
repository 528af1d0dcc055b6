import Foundation

/// A message of the gateway's stream (`/v1/events`, `/v1/stream`), read from its JSON.
///
/// Both transports carry the same one-line JSON objects, each naming its `type`; SSE
/// also names it in `event:`, which counts when the JSON has none. Anything the client
/// does not know (a later protocol version's message, JSON it cannot read) is
/// ``other(type:)`` and ignored: a server cannot break the stream with a message.
enum CueStreamMessage: Sendable, Equatable {
    /// `hello`, always first: the stream is open. `heartbeatMilliseconds` is the
    /// server's `heartbeat_ms`, clamped to ``heartbeatRange`` (a default when missing).
    case hello(heartbeatMilliseconds: Int)
    /// `cue`: something the user may read changed. An empty `tables` means anything may have.
    case cue(tables: [String], origin: String?)
    /// `token_expiring`: the stream closes `inMilliseconds` from now unless the token is renewed.
    case tokenExpiring(inMilliseconds: Int)
    /// SSE's last event, `closed`, with the close code and its name.
    case closed(code: Int?, reason: String?)
    /// A message this client does not act on.
    case other(type: String)

    /// The heartbeat the protocol names as its default, used when `hello` has none.
    static let defaultHeartbeatMilliseconds = 25_000
    /// The heartbeats a client believes: a hostile `heartbeat_ms` of 0 would make every
    /// stream look silent, a huge one would switch the silence watchdog off.
    static let heartbeatRange = 100...600_000

    /// Reads one message from its JSON text (the client's own parser, as for every
    /// answer); `eventType` is SSE's `event:` field. A field of the wrong type counts as
    /// missing, so one bad field never hides what the message is.
    init(json: String, eventType: String? = nil) {
        let object: [String: JSONValue]
        if case .object(let parsed)? = try? JSONValue(json: Data(json.utf8)) { object = parsed } else { object = [:] }
        let type = object["type"]?.stringValue ?? eventType ?? ""
        switch type {
        case "hello":
            let heartbeat = Self.integer(object["heartbeat_ms"]) ?? Self.defaultHeartbeatMilliseconds
            self = .hello(
                heartbeatMilliseconds: min(
                    max(heartbeat, Self.heartbeatRange.lowerBound), Self.heartbeatRange.upperBound))
        case "cue":
            let tables: [String] =
                if case .array(let values)? = object["tables"] { values.compactMap(\.stringValue) } else { [] }
            self = .cue(tables: tables, origin: object["origin"]?.stringValue)
        case "token_expiring":
            self = .tokenExpiring(inMilliseconds: max(0, Self.integer(object["in_ms"]) ?? 0))
        case "closed":
            self = .closed(code: Self.integer(object["code"]), reason: object["reason"]?.stringValue)
        default:
            self = .other(type: type)
        }
    }

    /// A JSON number as an `Int`, or nil when it is not a number or does not fit in
    /// ±2³¹ (a bound no field of the protocol comes near, and no arithmetic traps on).
    private static func integer(_ value: JSONValue?) -> Int? {
        let double: Double
        switch value {
        case .integer(let integer)?: double = Double(integer)
        case .double(let number)?: double = number
        default: return nil
        }
        guard double.isFinite, abs(double) < 2_147_483_648 else { return nil }
        return Int(double)
    }
}

/// What a stream's end asks of the client, by its close code and reason.
enum CueStreamCloseVerdict: Sendable, Equatable {
    /// Reconnect (with backoff): `4008 too_slow`, `1001` going away, a dropped connection, anything unknown.
    case reconnect
    /// Refresh the token, then reconnect: `4001 token_expired`.
    case refreshAndReconnect
    /// The session is over (`4003 session_revoked`, `4004 account_deleted`): sign out locally.
    case sessionEnded(code: Int)

    /// The verdict for a close frame or SSE `closed` event. The reason decides first:
    /// Linux's URLSession turns every custom close code into 1003, and the gateway
    /// names each code in its reason.
    init(code: Int?, reason: String?) {
        switch (reason, code) {
        case ("token_expired", _), (_, 4001): self = .refreshAndReconnect
        case ("session_revoked", _), (_, 4003): self = .sessionEnded(code: 4003)
        case ("account_deleted", _), (_, 4004): self = .sessionEnded(code: 4004)
        default: self = .reconnect
        }
    }

    /// The verdict for an HTTP refusal of the stream's request: a `401` is the token's
    /// fault (refresh and retry) unless it says the session is revoked; anything else
    /// is retried with backoff.
    init(refusedWith status: Int, code: String?) {
        switch (status, code) {
        case (401, "session_revoked"): self = .sessionEnded(code: 4003)
        case (401, _): self = .refreshAndReconnect
        default: self = .reconnect
        }
    }
}
