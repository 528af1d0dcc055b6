import FerryAuth
import FerryHTTP

extension Accounts {
    /// Counts an anonymous sign-up from `address`, or returns the `429` when the address
    /// has made its hour's.
    func admitSignUp(from address: String) -> APIError? {
        guard case .denied(let retryAfter) = anonymousSignUps.admit(address) else { return nil }
        let limit = "too many anonymous sign-ups from this address (\(anonymousSignUps.limit) per hour)"
        return .rateLimited(retryAfterSeconds: retryAfter, limit: limit)
    }

    /// Counts a password-reset request for `email` from `address`, or returns the `429`
    /// when either has made its hour's (the request is then not counted).
    func admitRecovery(email: String, address: String) -> APIError? {
        let limits = [
            (recoveryRequestsByEmail, email, "for this email"),
            (recoveryRequestsByAddress, address, "from this address"),
        ]
        for (limiter, key, whose) in limits {
            if case .denied(let retryAfter) = limiter.check(key) {
                let limit = "too many password reset requests \(whose) (\(limiter.limit) per hour)"
                return .rateLimited(retryAfterSeconds: retryAfter, limit: limit)
            }
        }
        for (limiter, key, _) in limits { _ = limiter.admit(key) }
        return nil
    }

    /// The rate-limit key of a client: its address without the port, an IPv6 address's
    /// /64 (``IPAddress/limitKey``). The address is the TCP peer's, or the client a
    /// trusted proxy named (``HTTPRequest/remoteAddress``).
    static func clientKey(_ request: HTTPRequest) -> String {
        request.remoteAddress?.ip.limitKey ?? "unknown"
    }
}
