import FerryAuth

/// What bounds `POST /v1/auth/refresh`: the grace window of a rotated token, and the
/// refreshes allowed per session and per client address (`429` past either, before the
/// database is asked), so that no client can turn refreshes into database load.
struct RefreshLimits: Sendable {
    /// How long a refused refresh waits for its `429`.
    static let refusalHoldMilliseconds: UInt64 = 1000

    /// Seconds a rotated token is answered with its successor again.
    let graceSeconds: Int
    let perSession: RateLimiter
    let perAddress: RateLimiter

    init(_ configuration: GatewayConfiguration) {
        graceSeconds = configuration.refreshGraceSeconds
        perSession = RateLimiter(limit: configuration.refreshesPerSessionPerMinute, windowSeconds: 60)
        perAddress = RateLimiter(limit: configuration.refreshesPerAddressPerMinute, windowSeconds: 60)
    }

    /// Counts a refresh of `rotation`'s session (its chain: every token of a session names
    /// the same one) from `address`, or returns the `429`.
    func admit(_ rotation: RefreshRotation, from address: String) -> APIError? {
        let limits = [
            (perAddress, address, "from this address"), (perSession, rotation.chainHash, "of this session"),
        ]
        for (limiter, key, whose) in limits {
            if case .denied(let retryAfter) = limiter.admit(key) {
                let limit = "too many refreshes \(whose) (\(limiter.limit) per minute)"
                return .rateLimited(retryAfterSeconds: retryAfter, limit: limit)
            }
        }
        return nil
    }
}
