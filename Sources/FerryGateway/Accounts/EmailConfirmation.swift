import FerryAuth
import FerryHTTP
import FerryLoop

/// `POST /v1/auth/confirm` and `POST /v1/auth/confirm/resend`: the code that
/// FERRY_EMAIL_CONFIRMATION=required mails on link (``LinkEmail``), redeemed, or mailed
/// anew. The database decides whether the caller has an email, whether it is confirmed,
/// and whether another account confirmed the same email first (`409 email_in_use`: whoever
/// confirms first owns it). A wrong code counts against the code (the fifth voids it);
/// resends count as password-reset requests do, per email and address. Loop thread only.
enum EmailConfirmation {
    static func confirm(
        _ request: HTTPRequest, _ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext
    ) {
        guard let body = responder.success(of: RequestBody.decode(ConfirmRequest.self, from: request)) else { return }
        guard let code = OneTimeCode.normalize(body.code) else {
            return responder.respond(APIError.invalidCode.response)
        }
        let query = ConfirmEmail(codeHash: OneTimeCode.hash(code))
        guard let directory = context.directory else {
            return confirmOnShard(query, claim: nil, caller, responder, context)
        }
        // With a directory, whoever confirms first across shards owns the email: the
        // caller's email claimed there first (``EmailDirectory``).
        context.run(CurrentAccount(), as: caller, answering: responder) { result in
            switch result {
            case .success(let account):
                guard let account, let email = account.email, !account.emailConfirmed else {
                    return confirmOnShard(query, claim: nil, caller, responder, context)
                }
                guard context.admit(caller, answering: responder) else { return }
                directory.claim(email, for: caller) { outcome in
                    context.requests.finish(caller)
                    switch outcome {
                    case .claimed(let claim): confirmOnShard(query, claim: claim, caller, responder, context)
                    case .refused(let refusal): responder.respond(refusal.response)
                    }
                }
            case .failure(let failure):
                responder.respond(context.failure(failure).response)
            }
        }
    }

    private static func confirmOnShard(
        _ query: ConfirmEmail, claim: EmailDirectory.Claim?, _ caller: Identity, _ responder: HTTPResponder,
        _ context: LoopContext
    ) {
        context.run(query, as: caller, answering: responder) { result in
            if let claim, let directory = context.directory, case .success(let answer) = result {
                var confirmed = false
                if case .confirmed = answer { confirmed = true }
                directory.settle(claim, linked: confirmed, confirmed: true, on: context.pool) {
                    answerConfirm(result, caller, responder, context)
                }
            } else {
                answerConfirm(result, caller, responder, context)
            }
        }
    }

    private static func answerConfirm(
        _ result: Result<ConfirmEmail.Answer, QueryFailure>, _ caller: Identity, _ responder: HTTPResponder,
        _ context: LoopContext
    ) {
        switch result {
        case .success(.confirmed(let email)):
            let user = UserBody(id: caller.userID, email: email, emailConfirmed: true)
            responder.respond(UserOnly(user: user).response)
        case .success(.invalidCode): responder.respond(APIError.invalidCode.response)
        case .success(.emailInUse): responder.respond(APIError.emailInUse.response)
        case .success(.anonymous): responder.respond(APIError.nothingToConfirm.response)
        case .success(.revoked): responder.respond(Accounts.sessionRevoked.response)
        case .failure(let failure): responder.respond(context.failure(failure).response)
        }
    }

    static func resend(
        _ request: HTTPRequest, _ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext,
        _ accounts: Accounts
    ) {
        guard accounts.sendsMail else { return responder.respond(APIError.mailNotConfigured.response) }
        if let refusal = accounts.admitRecovery(email: caller.userID, address: Accounts.clientKey(request)) {
            return responder.respond(refusal.response)
        }
        context.run(ResendConfirmation(code: .confirmation()), as: caller, answering: responder) { result in
            switch result {
            case .success(.sent): responder.respond(HTTPResponse(status: .accepted))
            case .success(.anonymous): responder.respond(APIError.nothingToConfirm.response)
            case .success(.revoked): responder.respond(Accounts.sessionRevoked.response)
            case .failure(let failure): responder.respond(context.failure(failure).response)
            }
        }
    }
}

/// `POST /v1/auth/confirm`: `{"code"}`.
struct ConfirmRequest: Decodable {
    var code: String
}

/// A one-time code to mail: the code itself (for the mail queue only), the hash the
/// database keeps, and how long it is good for.
struct MailedCode {
    var code: String
    var hash: String
    var validMinutes: Int

    /// Minutes an email confirmation code is good for.
    static let confirmationMinutes = 60

    /// A new email confirmation code.
    static func confirmation() -> MailedCode {
        let code = OneTimeCode.generate()
        return MailedCode(code: code, hash: OneTimeCode.hash(code), validMinutes: confirmationMinutes)
    }
}

extension APIError {
    /// Sign-in with the right password for an email its account has not confirmed.
    static let emailNotConfirmed = APIError(
        status: 403, code: "email_not_confirmed",
        message: "this email is not confirmed yet: send the code mailed to it to POST /v1/auth/confirm")
    /// Confirm or resend by an account with no email.
    static let nothingToConfirm = APIError(
        status: 403, code: "forbidden", message: "an anonymous account has no email to confirm: link one first")
}
