import FerryAuth
import FerryHTTP
import FerryLoop
import Foundation

/// `POST /v1/auth/signin`, one step per method: read the request, admit and reserve its
/// password check (``PasswordCheckReservation``), find the account (``FindCredentials``),
/// check the password on the hasher's threads, open the session (``SignIn``), settle the
/// reservation with what it came to. Each step calls the next from its one callback. Loop
/// thread only; it crosses to the hasher's threads inside a `LoopBound`.
///
/// An email of another shard goes there (``CrossShardSignIn``). A forwarded request with
/// ``ShardForwarder/signInCheckHeader`` is that shard's check-only sign-in: every step
/// but the session, answering `200 {"cloud_rows"}` (``SignInCheckAnswer``) and counting,
/// like a `resolution_required`, for nothing but a failure when the credentials are wrong.
struct SignInAttempt {
    let request: SignInRequest
    /// The user of the device's current anonymous session, when it sent one: it decides
    /// what happens to the rows the device made before signing in.
    let anonymousUserID: String?
    /// Check the credentials and count the account's rows only (no session).
    let checkOnly: Bool
    let reservation: PasswordCheckReservation
    let accounts: Accounts

    var responder: HTTPResponder { reservation.responder }
    var context: LoopContext { reservation.context }

    /// Reads the request, then admits and reserves its password check.
    static func start(_ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext, _ accounts: Accounts)
    {
        guard let body = responder.success(of: SignInRequest.read(request)),
            let anonymousUserID = responder.success(of: accounts.anonymousUser(of: request))
        else { return }
        accounts.route(
            body.email, of: request, responder, context,
            here: { reserve(body, anonymousUserID, request, responder, context, accounts) },
            elsewhere: { forward in
                CrossShardSignIn(
                    request: body, forward: forward, anonymousUserID: anonymousUserID, responder: responder,
                    context: context
                ).start()
            })
    }

    private static func reserve(
        _ body: SignInRequest, _ anonymousUserID: String?, _ request: HTTPRequest, _ responder: HTTPResponder,
        _ context: LoopContext, _ accounts: Accounts
    ) {
        // Honoured from another shard's gateway only; from a client, an ordinary sign-in.
        let checkOnly =
            Accounts.isForwarded(request) && request.headers[ShardForwarder.signInCheckHeader] != nil
        PasswordCheckReservation.reserve(
            email: body.email, address: Accounts.clientKey(request), accounts: accounts, responder: responder,
            context: context
        ) { reservation in
            SignInAttempt(
                request: body, anonymousUserID: anonymousUserID, checkOnly: checkOnly, reservation: reservation,
                accounts: accounts
            ).findAccount()
        }
    }

    private func findAccount() {
        context.pool.run(FindCredentials(email: request.email)) { [self] result in
            switch result {
            case .success(let credentials?): checkPassword(credentials)
            case .success(nil): spendAPasswordCheck()
            case .failure(let failure):
                reservation.ticket.finish()
                reservation.settle(as: nil, answering: context.failure(failure).response)
            }
        }
    }

    /// Checks the password against the account's hash, off the loop.
    private func checkPassword(_ credentials: FindCredentials.Credentials) {
        let attempt = LoopBound(self, loop: responder.loop)
        accounts.passwords.verify(request.password, against: credentials.passwordHash, on: responder.loop) { verified in
            let attempt = attempt.value
            attempt.reservation.ticket.finish()
            switch verified {
            case .success(true) where !credentials.emailConfirmed:
                // The right password, for an email not confirmed yet: it counts for nothing.
                attempt.reservation.settle(as: nil, answering: APIError.emailNotConfirmed.response)
            case .success(true) where attempt.checkOnly: attempt.countRows(userID: credentials.userID)
            case .success(true): attempt.openSession(userID: credentials.userID)
            case .success(false): attempt.reject()
            case .failure: attempt.reservation.settle(as: nil, answering: APIError.signInsBusy.response)
            }
        }
    }

    /// No such account: the same work as a real check, so that a missing account answers
    /// no faster, then the same refusal.
    private func spendAPasswordCheck() {
        let attempt = LoopBound(self, loop: responder.loop)
        accounts.passwords.verifyForUnknownAccount(request.password, on: responder.loop) { checked in
            let attempt = attempt.value
            attempt.reservation.ticket.finish()
            guard case .success = checked else {
                return attempt.reservation.settle(as: nil, answering: APIError.signInsBusy.response)
            }
            attempt.reject()
        }
    }

    private func reject() {
        reservation.settle(as: .failed, answering: APIError.invalidCredentials.response)
    }

    /// The password checked out, for a check-only sign-in: the account's live rows. It
    /// counts for nothing, as a `resolution_required` does.
    private func countRows(userID: String) {
        context.pool.run(UserRows(userID: userID)) { [self] result in
            switch result {
            case .success(let rows):
                reservation.settle(as: nil, answering: .json(SignInCheckAnswer(cloudRows: rows.liveRows)))
            case .failure(let failure):
                reservation.settle(as: nil, answering: context.failure(failure).response)
            }
        }
    }

    /// The password checked out: the session, and the first-sign-in choice.
    private func openSession(userID: String) {
        guard let user = UUID(uuidString: userID) else {
            return reservation.settle(as: nil, answering: APIError.unexpected.response)
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
                reservation.settle(as: .signedIn, answering: .json(answer))
            case .success(.resolutionRequired(let deviceRows, let cloudRows)):
                let answer = APIError.resolutionRequired(deviceRows: deviceRows, cloudRows: cloudRows)
                reservation.settle(as: nil, answering: answer.response)
            case .failure(let failure):
                reservation.settle(as: nil, answering: context.failure(failure).response)
            }
        }
    }
}
