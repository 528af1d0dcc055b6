import FerryAuth
import FerryHTTP
import FerryLoop
import Foundation

/// `POST /v1/auth/signin`, one step per method: read the request and check the limits
/// (``start(_:_:_:_:)``), find the account (``FindCredentials``), check the password on the
/// hasher's threads, open the session (``SignIn``). Each step calls the next from its one
/// callback. Loop thread only; it crosses to the hasher's threads inside a `LoopBound`.
struct SignInAttempt {
    let request: SignInRequest
    /// The user of the device's current anonymous session, when it sent one: it decides
    /// what happens to the rows the device made before signing in.
    let anonymousUserID: String?
    /// The client's rate-limit key.
    let address: String
    let responder: HTTPResponder
    let context: LoopContext
    let accounts: Accounts

    /// Reads the request, checks the failed-sign-in limits and looks the account up.
    static func start(_ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext, _ accounts: Accounts)
    {
        guard let body = responder.success(of: SignInRequest.read(request)),
            let anonymousUserID = responder.success(of: accounts.anonymousUser(of: request))
        else { return }
        let address = Accounts.clientKey(request)
        if let refusal = accounts.signInRefusal(email: body.email, address: address) {
            return responder.respond(refusal.response)
        }
        let attempt = SignInAttempt(
            request: body, anonymousUserID: anonymousUserID, address: address, responder: responder,
            context: context, accounts: accounts)
        context.pool.run(FindCredentials(email: body.email)) { result in
            switch result {
            case .success(let credentials?): attempt.checkPassword(credentials)
            case .success(nil): attempt.spendAPasswordCheck()
            case .failure(let failure): responder.respond(context.failure(failure).response)
            }
        }
    }

    /// Checks the password against the account's hash, off the loop.
    private func checkPassword(_ credentials: FindCredentials.Credentials) {
        let attempt = LoopBound(self, loop: responder.loop)
        accounts.passwords.verify(request.password, against: credentials.passwordHash, on: responder.loop) { verified in
            switch verified {
            case .success(true): attempt.value.openSession(userID: credentials.userID)
            case .success(false): attempt.value.reject()
            case .failure: attempt.value.responder.respond(APIError.signInsBusy.response)
            }
        }
    }

    /// No such account: the same work as a real check, so that a missing account answers
    /// no faster, then the same refusal.
    private func spendAPasswordCheck() {
        let attempt = LoopBound(self, loop: responder.loop)
        accounts.passwords.verifyForUnknownAccount(request.password, on: responder.loop) { _ in attempt.value.reject() }
    }

    private func reject() {
        accounts.noteFailedSignIn(email: request.email, address: address)
        responder.respond(APIError.invalidCredentials.response)
    }

    /// The password checked out: the session, and the first-sign-in choice.
    private func openSession(userID: String) {
        guard let user = UUID(uuidString: userID) else { return responder.respond(APIError.unexpected.response) }
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
                responder.respond(
                    .json(SignInAnswer(user: UserBody(id: userID, email: email), session: tokens, reset: reset)))
            case .success(.resolutionRequired(let deviceRows, let cloudRows)):
                responder.respond(APIError.resolutionRequired(deviceRows: deviceRows, cloudRows: cloudRows).response)
            case .failure(let failure):
                responder.respond(context.failure(failure).response)
            }
        }
    }
}
