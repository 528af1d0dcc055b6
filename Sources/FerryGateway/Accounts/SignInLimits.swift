/// The limits a sign-in's password check is reserved against in PostgreSQL
/// (``ReserveSignIn``; docs/ARCHITECTURE.md, "Sign-in attempts"): failed sign-ins per
/// email and per client address, and successful ones per account, each over the last
/// hour, across every gateway on the database.
struct SignInLimits: Sendable {
    /// The sliding window every limit counts over, seconds.
    static let windowSeconds = 3600

    /// Failed sign-ins (wrong email or password) per email, and per address, per window.
    var failedPerHour: Int
    /// Sign-ins that opened a session per account (its email) per window.
    var signInsPerAccountPerHour: Int

    /// Which limit refused a sign-in.
    enum Refusal: Sendable, Equatable {
        case failedForEmail
        case failedFromAddress
        case signInsForAccount
    }

    /// The `429` for `refusal`, naming the limit.
    func answer(_ refusal: Refusal, retryAfterSeconds: Int) -> APIError {
        let limit =
            switch refusal {
            case .failedForEmail: "too many failed sign-ins for this email (\(failedPerHour) per hour)"
            case .failedFromAddress: "too many failed sign-ins from this address (\(failedPerHour) per hour)"
            case .signInsForAccount: "too many sign-ins to this account (\(signInsPerAccountPerHour) per hour)"
            }
        return .rateLimited(retryAfterSeconds: retryAfterSeconds, limit: limit)
    }
}
