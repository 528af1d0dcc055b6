import FerryAuth

/// The password hashes (link) and checks (sign-in) each client address and each email has
/// in flight on this process, bounded before anything is hashed, so that one client
/// cannot fill the ``PasswordHasher``'s few threads and its queue, which every sign-in
/// shares: with the defaults (one per address, one per email) a flood from one address
/// holds one of the hasher's two threads and a victim's sign-in gets the other. Over a
/// bound the answer is `429 rate_limited` with `Retry-After: 1`, held one second
/// (``LoopContext/respondHeld(_:to:)``). Any thread: one instance serves every loop.
final class PasswordsInFlight: Sendable {
    /// Hashes in flight per client address (its rate-limit key).
    let perAddress: ConcurrencyLimit<String>
    /// Hashes in flight per email, normalised (the email signed in with or linked).
    let perEmail: ConcurrencyLimit<String>

    init(perAddress: Int, perEmail: Int) {
        self.perAddress = ConcurrencyLimit(limit: perAddress)
        self.perEmail = ConcurrencyLimit(limit: perEmail)
    }

    /// A password hash counted against its address and its email, to be given back with
    /// ``finish()`` exactly once, when the hasher has answered (or the request ended
    /// before it was asked).
    struct Ticket: Sendable {
        fileprivate let limits: PasswordsInFlight
        fileprivate let address: String
        fileprivate let email: String

        /// Gives the hash's places back.
        func finish() {
            limits.perAddress.release(address)
            limits.perEmail.release(email)
        }
    }

    /// Counts a hash for `email` from `address`, or returns the `429` to answer when
    /// either is at its limit (then nothing is counted).
    func admit(address: String, email: String) -> Result<Ticket, APIError> {
        guard perAddress.take(address) else {
            return .failure(Self.refusal("this address already has \(perAddress.limit) password checks in flight"))
        }
        guard perEmail.take(email) else {
            perAddress.release(address)
            return .failure(Self.refusal("this email already has \(perEmail.limit) password checks in flight"))
        }
        return .success(Ticket(limits: self, address: address, email: email))
    }

    private static func refusal(_ what: String) -> APIError {
        let seconds = RequestsInFlight.retryAfterSeconds
        return .rateLimited(
            retryAfterSeconds: seconds,
            message: "\(what) on this server; wait for an answer, or retry after \(seconds) s")
    }
}
