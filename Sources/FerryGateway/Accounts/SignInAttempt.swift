import FerryAuth
import FerryHTTP
import FerryLoop
import Foundation

/// `POST /v1/auth/signin`, one step per method: read the request and count its password
/// check in flight (``start(_:_:_:_:)``), reserve the check against the sign-in limits in
/// PostgreSQL (``ReserveSignIn``), find the account (``FindCredentials``), check the password
/// on the hasher's threads, open the session (``SignIn``), settle the reservation with what
/// it came to (``SettleSignIn``). Each step calls the next from its one callback. Loop
/// thread only; it crosses to the hasher's threads inside a `LoopBound`.
struct SignInAttempt {
    let request: SignInRequest
    /// The user of the device's current anonymous session, when it sent one: it decides
    /// what happens to the rows the device made before signing in.
    let anonymousUserID: String?
    /// The client's rate-limit key.
    let address: String
    /// The check's place in ``PasswordsInFlight``, given back once the hasher has answered.
    let ticket: PasswordsInFlight.Ticket
    let responder: HTTPResponder
    let context: LoopContext
    let accounts: Accounts

    /// Reads the request, counts its password check in flight and reserves it.
    static func start(_ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext, _ accounts: Accounts)
    {
        guard let body = responder.success(of: SignInRequest.read(request)),
            let anonymousUserID = responder.success(of: accounts.anonymousUser(of: request))
        else { return }
        let address = Accounts.clientKey(request)
        let ticket: PasswordsInFlight.Ticket
        switch accounts.passwordsInFlight.admit(address: address, email: body.email) {
        case .success(let admitted): ticket = admitted
        case .failure(let refusal): return context.respondHeld(refusal, to: responder)
        }
        let attempt = SignInAttempt(
            request: body, anonymousUserID: anonymousUserID, address: address, ticket: ticket,
            responder: responder, context: context, accounts: accounts)
        attempt.reserve()
    }

    /// Reserves the check; a spent limit is answered `429` before anything is hashed.
    private func reserve() {
        let reservation = ReserveSignIn(email: request.email, address: address, limits: accounts.signInLimits)
        context.pool.run(reservation) { [self] result in
            switch result {
            case .success(.reserved(let attemptID)):
                findAccount(attemptID: attemptID)
            case .success(.refused(let refusal, let retryAfter)):
                ticket.finish()
                context.respondHeld(accounts.signInLimits.answer(refusal, retryAfterSeconds: retryAfter), to: responder)
            case .failure(let failure):
                ticket.finish()
                responder.respond(context.failure(failure).response)
            }
        }
    }

    private func findAccount(attemptID: Int) {
        context.pool.run(FindCredentials(email: request.email)) { [self] result in
            switch result {
            case .success(let credentials?): checkPassword(credentials, attemptID: attemptID)
            case .success(nil): spendAPasswordCheck(attemptID: attemptID)
            case .failure(let failure):
                ticket.finish()
                settle(attemptID, as: nil, answering: context.failure(failure).response)
            }
        }
    }

    /// Checks the password against the account's hash, off the loop.
    private func checkPassword(_ credentials: FindCredentials.Credentials, attemptID: Int) {
        let attempt = LoopBound(self, loop: responder.loop)
        accounts.passwords.verify(request.password, against: credentials.passwordHash, on: responder.loop) { verified in
            let attempt = attempt.value
            attempt.ticket.finish()
            switch verified {
            case .success(true) where !credentials.emailConfirmed:
                // The right password, for an email not confirmed yet: it counts for nothing.
                attempt.settle(attemptID, as: nil, answering: APIError.emailNotConfirmed.response)
            case .success(true): attempt.openSession(userID: credentials.userID, attemptID: attemptID)
            case .success(false): attempt.reject(attemptID: attemptID)
            case .failure: attempt.settle(attemptID, as: nil, answering: APIError.signInsBusy.response)
            }
        }
    }

    /// No such account: the same work as a real check, so that a missing account answers
    /// no faster, then the same refusal.
    private func spendAPasswordCheck(attemptID: Int) {
        let attempt = LoopBound(self, loop: responder.loop)
        accounts.passwords.verifyForUnknownAccount(request.password, on: responder.loop) { checked in
            let attempt = attempt.value
            attempt.ticket.finish()
            guard case .success = checked else {
                return attempt.settle(attemptID, as: nil, answering: APIError.signInsBusy.response)
            }
            attempt.reject(attemptID: attemptID)
        }
    }

    private func reject(attemptID: Int) {
        settle(attemptID, as: .failed, answering: APIError.invalidCredentials.response)
    }

    /// The password checked out: the session, and the first-sign-in choice.
    private func openSession(userID: String, attemptID: Int) {
        guard let user = UUID(uuidString: userID) else {
            return settle(attemptID, as: nil, answering: APIError.unexpected.response)
        }
        let refreshToken = RefreshToken.generate()
        let signIn = SignIn(
            userID: userID, deviceID: request.deviceID, refreshTokenHash: RefreshToken.hash(refreshToken),
            anonymousUserID: anonymousUserID, resolve: request.resolve)
        context.pool.run(signIn) { [self] result in
            switch result {
            case .success(.signedIn(let session, let email, let reset)):
                let tokens = accounts.session(
                    userID: user, sessionID: session, deviceID: request.deviceID, isAnonymous: false,
                    refreshToken: refreshToken)
                // Only an account that confirmed its email gets here.
                let user = UserBody(id: userID, email: email, emailConfirmed: true)
                let answer = SignInAnswer(user: user, session: tokens, reset: reset)
                settle(attemptID, as: .signedIn, answering: .json(answer))
            case .success(.resolutionRequired(let deviceRows, let cloudRows)):
                let answer = APIError.resolutionRequired(deviceRows: deviceRows, cloudRows: cloudRows)
                settle(attemptID, as: nil, answering: answer.response)
            case .failure(let failure):
                settle(attemptID, as: nil, answering: context.failure(failure).response)
            }
        }
    }

    /// Settles the reservation with `outcome` (nil: it counts for nothing), then answers
    /// `response` whether the settling worked or not: an unsettled reservation counts as a
    /// failure and a sign-in until it leaves the window, never less.
    private func settle(_ attemptID: Int, as outcome: SettleSignIn.Outcome?, answering response: HTTPResponse) {
        context.pool.run(SettleSignIn(attemptID: attemptID, outcome: outcome)) { [context, responder] result in
            if case .failure(let failure) = result {
                context.logger.log(.warning, "a sign-in attempt was not settled", ["error": failure.description])
            }
            responder.respond(response)
        }
    }
}
