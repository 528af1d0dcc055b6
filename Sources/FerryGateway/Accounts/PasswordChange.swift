import FerryAuth
import FerryHTTP
import FerryLoop
import Foundation

/// `POST /v1/auth/password`, one step per method: read the request, find the caller's
/// email and password hash (``CallerCredentials``), check the current password and hash
/// the new one on the hasher's threads, then change it (``ChangePassword``): every
/// session of the account ends and the device gets a new one. A wrong current password
/// counts as a failed sign-in of the email and the address, under the same limits.
/// Loop thread only; it crosses to the hasher's threads inside a `LoopBound`.
struct PasswordChange {
    let request: PasswordChangeRequest
    let caller: Identity
    let address: String
    let responder: HTTPResponder
    let context: LoopContext
    let accounts: Accounts

    static func start(
        _ request: HTTPRequest, _ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext,
        _ accounts: Accounts
    ) {
        guard let body = responder.success(of: PasswordChangeRequest.read(request)) else { return }
        let change = PasswordChange(
            request: body, caller: caller, address: Accounts.clientKey(request), responder: responder,
            context: context, accounts: accounts)
        context.run(CallerCredentials(), as: caller, answering: responder) { result in
            switch result {
            case .success(.found(let email, let hash)): change.checkCurrentPassword(email: email, hash: hash)
            case .success(.anonymous): responder.respond(APIError.anonymousHasNoPassword.response)
            case .success(.revoked): responder.respond(Accounts.sessionRevoked.response)
            case .failure(let failure): responder.respond(context.failure(failure).response)
            }
        }
    }

    private func checkCurrentPassword(email: String, hash: String) {
        if let refusal = accounts.signInRefusal(email: email, address: address) {
            return responder.respond(refusal.response)
        }
        let change = LoopBound(self, loop: responder.loop)
        accounts.passwords.verify(request.currentPassword, against: hash, on: responder.loop) { verified in
            let change = change.value
            switch verified {
            case .success(true): change.hashNewPassword(checkedHash: hash)
            case .success(false):
                change.accounts.noteFailedSignIn(email: email, address: change.address)
                change.responder.respond(APIError.invalidCredentials.response)
            case .failure: change.responder.respond(APIError.signInsBusy.response)
            }
        }
    }

    private func hashNewPassword(checkedHash: String) {
        let change = LoopBound(self, loop: responder.loop)
        accounts.passwords.hash(request.newPassword, on: responder.loop) { hashed in
            let change = change.value
            guard case .success(let newHash) = hashed else {
                return change.responder.respond(APIError.signInsBusy.response)
            }
            change.replace(checkedHash: checkedHash, newHash: newHash)
        }
    }

    private func replace(checkedHash: String, newHash: String) {
        let refreshToken = RefreshToken.generate()
        let query = ChangePassword(
            checkedHash: checkedHash, newHash: newHash, refreshTokenHash: RefreshToken.hash(refreshToken))
        context.run(query, as: caller, answering: responder) { [self] result in
            switch result {
            case .success(.changed(let session, let email, let emailConfirmed)):
                guard let user = UUID(uuidString: caller.userID) else {
                    return responder.respond(APIError.unexpected.response)
                }
                // This gateway refuses the old session at once; the others on the notification.
                if let old = UUID(uuidString: caller.sessionID) { accounts.refuseSession(old) }
                let tokens = accounts.session(
                    userID: user, sessionID: session, deviceID: caller.deviceID, isAnonymous: false,
                    refreshToken: refreshToken)
                responder.respond(
                    .json(
                        UserAndSession(
                            user: UserBody(id: caller.userID, email: email, emailConfirmed: emailConfirmed),
                            session: tokens)))
            case .success(.passwordChanged):
                // Checked against a password that another request replaced meanwhile.
                responder.respond(APIError.invalidCredentials.response)
            case .success(.revoked):
                responder.respond(Accounts.sessionRevoked.response)
            case .failure(let failure):
                responder.respond(context.failure(failure).response)
            }
        }
    }
}
