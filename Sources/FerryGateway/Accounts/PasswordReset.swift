import FerryAuth
import FerryHTTP
import FerryLoop
import Foundation

/// `POST /v1/auth/recover` and `POST /v1/auth/recover/confirm`: a code mailed to an
/// account's email, then a new password with it.
///
/// The request is answered `202` whether or not an account has the email, after the same
/// work either way (one statement; the mail is queued in it and sent by the
/// ``MailSender``, never here). The confirmation hashes the new password, then redeems
/// the code and sets the password in one statement (``ResetPassword``): a wrong code
/// counts against the code (the fifth voids it) and as a failed sign-in of the email and
/// address, under the same limits as sign-in. Loop thread only.
enum PasswordReset {
    /// Minutes a reset code is good for.
    static let codeMinutes = 15

    static func request(
        _ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext, _ accounts: Accounts
    ) {
        guard accounts.sendsMail else { return responder.respond(APIError.mailNotConfigured.response) }
        guard let body = responder.success(of: RecoverRequest.read(request)) else { return }
        if let refusal = accounts.admitRecovery(email: body.email, address: Accounts.clientKey(request)) {
            return responder.respond(refusal.response)
        }
        let code = OneTimeCode.generate()
        let query = RequestPasswordReset(
            email: body.email, codeHash: OneTimeCode.hash(code), code: code, validMinutes: codeMinutes)
        context.pool.run(query) { result in
            switch result {
            case .success: responder.respond(HTTPResponse(status: .accepted))
            case .failure(let failure): responder.respond(context.failure(failure).response)
            }
        }
    }

    static func confirm(
        _ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext, _ accounts: Accounts
    ) {
        guard let body = responder.success(of: RecoverConfirmRequest.read(request)) else { return }
        let address = Accounts.clientKey(request)
        if let refusal = accounts.signInRefusal(email: body.email, address: address) {
            return responder.respond(refusal.response)
        }
        guard let code = body.code else {
            accounts.noteFailedSignIn(email: body.email, address: address)
            return responder.respond(APIError.invalidCode.response)
        }
        let waiting = LoopBound((responder, context), loop: responder.loop)
        accounts.passwords.hash(body.newPassword, on: responder.loop) { hashed in
            let (responder, context) = waiting.value
            guard case .success(let newHash) = hashed else { return responder.respond(APIError.signInsBusy.response) }
            let refreshToken = RefreshToken.generate()
            let query = ResetPassword(
                email: body.email, codeHash: OneTimeCode.hash(code), newHash: newHash, deviceID: body.deviceID,
                refreshTokenHash: RefreshToken.hash(refreshToken))
            context.pool.run(query) { result in
                switch result {
                case .success(.reset(let user, let session, let email)):
                    let tokens = accounts.session(
                        userID: user, sessionID: session, deviceID: body.deviceID, isAnonymous: false,
                        refreshToken: refreshToken)
                    // Only a confirmed email can be reset.
                    let user = UserBody(id: user.lowercasedString, email: email, emailConfirmed: true)
                    responder.respond(.json(UserAndSession(user: user, session: tokens)))
                case .success(.invalidCode):
                    accounts.noteFailedSignIn(email: body.email, address: address)
                    responder.respond(APIError.invalidCode.response)
                case .failure(let failure):
                    responder.respond(context.failure(failure).response)
                }
            }
        }
    }
}
