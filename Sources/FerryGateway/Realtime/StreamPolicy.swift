/// The knobs of PROTOCOL.md's stream lifecycle, the same for every stream of a process.
/// A class: every stream's ``StreamLifecycle`` holds the process's one policy, a
/// reference rather than a copy of its fields (idle streams are counted in bytes).
final class StreamPolicy: Sendable {
    /// Between heartbeats (the `heartbeat_ms` of `hello`).
    let heartbeatMilliseconds: Int
    /// How long before its token expires a stream gets `token_expiring`.
    let tokenWarningSeconds: Int
    /// Unsent bytes over this close the stream `4008 too_slow` at once.
    let maxUnsentBytes: Int

    init(heartbeatMilliseconds: Int = 25_000, tokenWarningSeconds: Int = 60, maxUnsentBytes: Int = 64 * 1024) {
        self.heartbeatMilliseconds = heartbeatMilliseconds
        self.tokenWarningSeconds = tokenWarningSeconds
        self.maxUnsentBytes = maxUnsentBytes
    }
}
