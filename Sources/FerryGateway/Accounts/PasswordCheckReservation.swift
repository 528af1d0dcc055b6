import FerryHTTP
import FerryLoop

/// A password check (or code guess) admitted before anything is hashed: a place in
/// ``PasswordsInFlight`` for its email and address, and a reservation against the
/// sign-in limits in PostgreSQL (``ReserveSignIn``), which counts it at once on every
/// gateway. Sign-in, password change and reset confirmation each take one, so that a
/// wrong password or code from any of them counts under the same limits. Loop thread
/// only.
struct PasswordCheckReservation {
    /// The reservation's row in `ferry.sign_in_attempts`, settled with ``settle(as:answering:)``.
    let attemptID: Int
    /// The check's place in ``PasswordsInFlight``, given back once the hasher has answered.
    let ticket: PasswordsInFlight.Ticket
    let responder: HTTPResponder
    let context: LoopContext

    /// Admits a check of `email`'s password from `address` and reserves it, then calls
    /// `next`; answers the `429` itself (held a second) when a bound or a limit is spent.
    static func reserve(
        email: String, address: String, accounts: Accounts, responder: HTTPResponder, context: LoopContext,
        then next: @escaping (PasswordCheckReservation) -> Void
    ) {
        let ticket: PasswordsInFlight.Ticket
        switch accounts.passwordsInFlight.admit(address: address, email: email) {
        case .success(let admitted): ticket = admitted
        case .failure(let refusal): return context.respondHeld(refusal, to: responder)
        }
        let reservation = ReserveSignIn(email: email, address: address, limits: accounts.signInLimits)
        context.pool.run(reservation) { result in
            switch result {
            case .success(.reserved(let attemptID)):
                next(
                    PasswordCheckReservation(
                        attemptID: attemptID, ticket: ticket, responder: responder, context: context))
            case .success(.refused(let refusal, let retryAfter)):
                ticket.finish()
                context.respondHeld(accounts.signInLimits.answer(refusal, retryAfterSeconds: retryAfter), to: responder)
            case .failure(let failure):
                ticket.finish()
                responder.respond(context.failure(failure).response)
            }
        }
    }

    /// Settles the reservation with `outcome` (nil: it counts for nothing), then answers
    /// `response` whether the settling worked or not: an unsettled reservation counts as a
    /// failure and a sign-in until it leaves the window, never less. The ticket must have
    /// been given back already.
    func settle(as outcome: SettleSignIn.Outcome?, answering response: HTTPResponse) {
        context.pool.run(SettleSignIn(attemptID: attemptID, outcome: outcome)) { [context, responder] result in
            if case .failure(let failure) = result {
                context.logger.log(.warning, "a sign-in attempt was not settled", ["error": failure.description])
            }
            responder.respond(response)
        }
    }
}
