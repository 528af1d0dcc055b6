import FerryAuth
import FerryHTTP
import FerryLoop
import Foundation

/// `POST /v1/auth/password`, one step per method: read the request, find the caller's
/// email and password hash (``CallerCredentials``), admit and reserve the check
/// (``PasswordCheckReservation``), check the current password and hash the new one on the
/// hasher's threads, then change it (``ChangePassword``): every session of the account
/// ends and the device gets a new one. A wrong current password counts as a failed
/// sign-in of the email and the address, under the same limits as sign-in. Loop thread
/// only; it crosses to the hasher's threads inside a `LoopBound`.
struct PasswordChange {
    let request: PasswordChangeRequest
    let caller: Identity
    let reservation: PasswordCheckReservation
    let accounts: Accounts

    var responder: HTTPResponder { reservation.responder }
    var context: LoopContext { reservation.context }

    static func start(
        _ request: HTTPRequest, _ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext,
        _ accounts: Accounts
    ) {
        guard let body = responder.success(of: PasswordChangeRequest.read(request)) else { return }
        let address = Accounts.clientKey(request)
        context.run(CallerCredentials(), as: caller, answering: responder) { result in
            switch result {
            case .success(.found(let email, let hash)):
                PasswordCheckReservation.reserve(
                    email: EmailAddress.normalize(email) ?? email.lowercased(), address: address, accounts: accounts,
                    responder: responder, context: context
                ) { reservation in
                    PasswordChange(request: body, caller: caller, reservation: reservation, accounts: accounts)
                        .checkCurrentPassword(hash: hash)
                }
            case .success(.anonymous): responder.respond(APIError.anonymousHasNoPassword.response)
            case .success(.revoked): responder.respond(Accounts.sessionRevoked.response)
            case .failure(let failure): responder.respond(context.failure(failure).response)
            }
        }
    }

    private func checkCurrentPassword(hash: String) {
        let change = LoopBound(self, loop: responder.loop)
        accounts.passwords.verify(request.currentPassword, against: hash, on: responder.loop) { verified in
            let change = change.value
            switch verified {
            case .success(true): change.hashNewPassword(checkedHash: hash)
            case .success(false):
                change.reservation.ticket.finish()
                change.reservation.settle(as: .failed, answering: APIError.invalidCredentials.response)
            case .failure:
                change.reservation.ticket.finish()
                change.reservation.settle(as: nil, answering: APIError.signInsBusy.response)
            }
        }
    }

    private func hashNewPassword(checkedHash: String) {
        let change = LoopBound(self, loop: responder.loop)
        accounts.passwords.hash(request.newPassword, on: responder.loop) { hashed in
            let change = change.value
            change.reservation.ticket.finish()
            guard case .success(let newHash) = hashed else {
                return change.reservation.settle(as: nil, answering: APIError.signInsBusy.response)
            }
            change.replace(checkedHash: checkedHash, newHash: newHash)
        }
    }

    /// The current password checked out, so the reservation counts for nothing whatever
    /// the change comes to.
    private func replace(checkedHash: String, newHash: String) {
        let refreshToken = RefreshToken.generate()
        let query = ChangePassword(
            checkedHash: checkedHash, newHash: newHash, refreshTokenHash: RefreshToken.hash(refreshToken))
        if let refusal = context.requests.admit(caller, pushing: 0) {
            return reservation.settle(as: nil, answering: refusal.response)
        }
        context.run(admitted: query, as: caller) { [self] result in
            reservation.settle(as: nil, answering: answer(result, refreshToken: refreshToken))
        }
    }

    private func answer(_ result: Result<ChangePassword.Answer, QueryFailure>, refreshToken: String) -> HTTPResponse {
        switch result {
        case .success(.changed(let session, let email, let emailConfirmed)):
            guard let user = UUID(uuidString: caller.userID) else { return APIError.unexpected.response }
            // This gateway refuses the old session at once; the others on the notification.
            if let old = UUID(uuidString: caller.sessionID) { accounts.refuseSession(old) }
            let tokens = accounts.session(
                userID: user, sessionID: session, deviceID: caller.deviceID, isAnonymous: false,
                refreshToken: refreshToken)
            let body = UserAndSession(
                user: UserBody(id: caller.userID, email: email, emailConfirmed: emailConfirmed), session: tokens)
            return .json(body)
        case .success(.passwordChanged):
            // Checked against a password that another request replaced meanwhile.
            return APIError.invalidCredentials.response
        case .success(.revoked):
            return Accounts.sessionRevoked.response
        case .failure(let failure):
            return context.failure(failure).response
        }
    }
}
