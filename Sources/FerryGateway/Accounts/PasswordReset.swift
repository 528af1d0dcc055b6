import FerryAuth
import FerryHTTP
import FerryLoop
import Foundation

/// `POST /v1/auth/recover` and `POST /v1/auth/recover/confirm`: a code mailed to an
/// account's email, then a new password with it.
///
/// The request is answered `202` whether or not an account has the email, after the same
/// work either way (one statement; the mail is queued in it and sent by the
/// ``MailSender``, never here). The confirmation is a password check like a sign-in's
/// (``PasswordCheckReservation``, so a wrong code counts as a failed sign-in of the email
/// and address under the same limits): it checks the code (``CheckResetCode``; a wrong
/// one counts against the code, the fifth voids it), and only then hashes the new
/// password and redeems the code and sets the password in one statement
/// (``ResetPassword``). An email the directory puts on another shard is forwarded there
/// (``Accounts/route(_:of:_:_:here:elsewhere:)``): the request after this gateway's own
/// limits, still answered `202` whatever that shard says, and the confirmation with that
/// shard's answer relayed. Loop thread only.
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
        accounts.route(
            body.email, of: request, responder, context,
            here: { requestHere(body, responder, context) },
            elsewhere: { forward in
                forward.post("/v1/auth/recover") { answer in
                    // The same answer as for any email: a failure there shows only in the log.
                    if answer.status != .accepted {
                        context.logger.log(
                            .warning, "a recovery forwarded to another shard failed",
                            ["shard": String(forward.shard), "status": String(answer.status.code)])
                    }
                    responder.respond(HTTPResponse(status: .accepted))
                }
            })
    }

    private static func requestHere(_ body: RecoverRequest, _ responder: HTTPResponder, _ context: LoopContext) {
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
        accounts.route(
            body.email, of: request, responder, context,
            here: { confirmHere(body, request, responder, context, accounts) },
            elsewhere: { forward in forward.post("/v1/auth/recover/confirm") { responder.respond($0) } })
    }

    private static func confirmHere(
        _ body: RecoverConfirmRequest, _ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext,
        _ accounts: Accounts
    ) {
        PasswordCheckReservation.reserve(
            email: body.email, address: Accounts.clientKey(request), accounts: accounts, responder: responder,
            context: context
        ) { reservation in
            guard let code = body.code else {
                reservation.ticket.finish()
                return reservation.settle(as: .failed, answering: APIError.invalidCode.response)
            }
            let codeHash = OneTimeCode.hash(code)
            context.pool.run(CheckResetCode(email: body.email, codeHash: codeHash)) { checked in
                switch checked {
                case .success(let answer) where answer.matches:
                    reset(body, codeHash: codeHash, reservation, accounts)
                case .success:
                    reservation.ticket.finish()
                    reservation.settle(as: .failed, answering: APIError.invalidCode.response)
                case .failure(let failure):
                    reservation.ticket.finish()
                    reservation.settle(as: nil, answering: context.failure(failure).response)
                }
            }
        }
    }

    /// The code checked out: the new password's hash, then the reset.
    private static func reset(
        _ body: RecoverConfirmRequest, codeHash: String, _ reservation: PasswordCheckReservation,
        _ accounts: Accounts
    ) {
        let waiting = LoopBound(reservation, loop: reservation.responder.loop)
        accounts.passwords.hash(body.newPassword, on: reservation.responder.loop) { hashed in
            let reservation = waiting.value
            reservation.ticket.finish()
            guard case .success(let newHash) = hashed else {
                return reservation.settle(as: nil, answering: APIError.signInsBusy.response)
            }
            let refreshToken = RefreshToken.generate()
            let query = ResetPassword(
                email: body.email, codeHash: codeHash, newHash: newHash, deviceID: body.deviceID,
                refreshTokenHash: RefreshToken.hash(refreshToken))
            reservation.context.pool.run(query) { result in
                switch result {
                case .success(.reset(let user, let session, let email)):
                    let tokens = accounts.session(
                        userID: user, sessionID: session, deviceID: body.deviceID, isAnonymous: false,
                        refreshToken: refreshToken)
                    // Only a confirmed email can be reset.
                    let user = UserBody(id: user.lowercasedString, email: email, emailConfirmed: true)
                    reservation.settle(as: .signedIn, answering: .json(UserAndSession(user: user, session: tokens)))
                case .success(.invalidCode):
                    // Used or voided since it was checked.
                    reservation.settle(as: .failed, answering: APIError.invalidCode.response)
                case .failure(let failure):
                    reservation.settle(as: nil, answering: reservation.context.failure(failure).response)
                }
            }
        }
    }
}
