/// The answer to a lock claim: `{"holder", "heartbeat_at"}`.
struct LockClaimAnswer: Sendable, Decodable {
    var holder: String
    var heartbeatAt: String

    private enum CodingKeys: String, CodingKey {
        case holder
        case heartbeatAt = "heartbeat_at"
    }
}
