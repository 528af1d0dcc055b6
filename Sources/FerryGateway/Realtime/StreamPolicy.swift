/// The knobs of PROTOCOL.md's stream lifecycle, the same for every stream of a process.
struct StreamPolicy: Sendable {
    /// Between heartbeats (the `heartbeat_ms` of `hello`).
    var heartbeatMilliseconds: Int = 25_000
    /// How long before its token expires a stream gets `token_expiring`.
    var tokenWarningSeconds: Int = 60
    /// Unsent bytes over this close the stream `4008 too_slow` at once.
    var maxUnsentBytes: Int = 64 * 1024
}
