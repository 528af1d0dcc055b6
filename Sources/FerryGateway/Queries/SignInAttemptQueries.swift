/// `ferry.reserve_sign_in`: a sign-in's password check, reserved against the sign-in limits
/// before it is hashed (docs/ARCHITECTURE.md, "Sign-in attempts").
struct ReserveSignIn: SingleRowQuery {
    static let preparedName: String? = "ferry_reserve_sign_in"
    static let sql = """
        select attempt_id, refused, retry_after_seconds
        from ferry.reserve_sign_in($1, $2, $3, $4, make_interval(secs => $5))
        """
    static let columns = ["attempt_id", "refused", "retry_after_seconds"]

    /// The email, normalised.
    var email: String
    /// The client's rate-limit key.
    var address: String
    var limits: SignInLimits
    var parameters: [String?] {
        [
            email, address, String(limits.failedPerHour), String(limits.signInsPerAccountPerHour),
            String(SignInLimits.windowSeconds),
        ]
    }

    enum Answer: QueryRowDecodable, Equatable {
        /// The check may go ahead; settle it with ``SettleSignIn``.
        case reserved(attemptID: Int)
        /// A limit is spent for this many more seconds.
        case refused(SignInLimits.Refusal, retryAfterSeconds: Int)

        init(_ row: QueryRow) throws(QueryShapeError) {
            if let attempt = try row.decodeIfPresent("attempt_id", as: Int.self) {
                self = .reserved(attemptID: attempt)
                return
            }
            let refusal: SignInLimits.Refusal =
                switch try row.decode("refused", as: String.self) {
                case "email": .failedForEmail
                case "address": .failedFromAddress
                default: .signInsForAccount
                }
            self = .refused(refusal, retryAfterSeconds: try row.decode("retry_after_seconds"))
        }
    }
}

/// `ferry.settle_sign_in`: what a reserved password check came to.
struct SettleSignIn: DatabaseQuery {
    static let preparedName: String? = "ferry_settle_sign_in"
    // In FROM: a void column cannot be described as a view's (QueryShapeTests).
    static let sql = "select true as settled from ferry.settle_sign_in($1, $2)"
    static let columns = ["settled"]

    var attemptID: Int
    /// Nil: the attempt counts for nothing (deleted).
    var outcome: Outcome?
    var parameters: [String?] { [String(attemptID), outcome?.rawValue] }

    enum Outcome: String {
        case failed
        case signedIn = "signed_in"
    }

    static func answer(from rows: QueryRows) throws(QueryShapeError) {}
}
