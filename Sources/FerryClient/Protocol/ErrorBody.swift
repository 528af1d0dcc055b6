/// Every error answer's body: `{"error": {"code", "message", "retryable", …}}`; some codes
/// add fields (`lock_held`'s `holder` and `heartbeat_age_ms`, `resolution_required`'s
/// `device_rows` and `cloud_rows`).
struct ErrorBody: Sendable, Decodable {
    struct Error: Sendable, Decodable {
        var code: String?
        var message: String?
        var retryable: Bool?
        /// `lock_held`, `lock_lost`: the device holding the lock.
        var holder: String?
        /// `lock_held`: how old the holder's last heartbeat is.
        var heartbeatAgeMilliseconds: Int64?
        /// `resolution_required`: the rows of each side.
        var deviceRows: Int?
        var cloudRows: Int?

        private enum CodingKeys: String, CodingKey {
            case code, message, retryable, holder
            case heartbeatAgeMilliseconds = "heartbeat_age_ms"
            case deviceRows = "device_rows"
            case cloudRows = "cloud_rows"
        }
    }

    var error: Error
}
