import FerryAuth
import FerryHTTP
import FerryLoop
import FerryPostgres
import Foundation

/// PROTOCOL.md's Accounts section: anonymous sign-up, who am I, refresh, link,
/// sign-in with the first-sign-in choice (``SignInAttempt``), email confirmation
/// (``EmailConfirmation``), sign-out and account deletion. Each handler reads the request (``SignUpRequest`` and the others), calls
/// its query (`Queries/AccountQueries.swift`) and maps the answer.
struct AccountRoutes {
    let accounts: Accounts

    /// Adds the routes for one loop; handlers use that loop's `context`.
    func register(in router: inout Router, context: LoopContext) {
        router.post("/v1/auth/anonymous") { request, responder in
            signUpAnonymous(request, responder, context)
        }
        router.post("/v1/auth/refresh") { request, responder in
            refresh(request, responder, context)
        }
        router.post("/v1/auth/signin") { [accounts] request, responder in
            SignInAttempt.start(request, responder, context, accounts)
        }
        router.group(gate: accounts.callers) { routes in
            routes.get("/v1/auth/user") { _, caller, responder in
                currentUser(caller, responder, context)
            }
            routes.post("/v1/auth/link") { request, caller, responder in
                link(request, caller, responder, context)
            }
            routes.post("/v1/auth/signout") { _, caller, responder in
                signOut(caller, responder, context)
            }
            routes.post("/v1/auth/confirm") { request, caller, responder in
                EmailConfirmation.confirm(request, caller, responder, context)
            }
            routes.post("/v1/auth/confirm/resend") { [accounts] request, caller, responder in
                EmailConfirmation.resend(request, caller, responder, context, accounts)
            }
        }
        // A retry after a lost answer carries a token whose session the deletion revoked:
        // the database, not the cache, decides (a deleted user answers 204 again).
        router.group(gate: accounts.callersOfRevokedSessionsToo) { routes in
            routes.delete("/v1/account") { request, caller, responder in
                deleteAccount(request, caller, responder, context)
            }
        }
    }

    // MARK: - Anonymous sign-up

    private func signUpAnonymous(_ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext) {
        if let refusal = accounts.admitSignUp(from: Accounts.clientKey(request)) {
            return responder.respond(refusal.response)
        }
        guard let body = responder.success(of: SignUpRequest.read(request)) else { return }
        let refreshToken = RefreshToken.generate()
        let signUp = SignUpAnonymous(deviceID: body.deviceID, refreshTokenHash: RefreshToken.hash(refreshToken))
        context.pool.run(signUp) { [accounts] result in
            switch result {
            case .success(let account):
                let session = accounts.session(
                    userID: account.userID, sessionID: account.sessionID, deviceID: body.deviceID, isAnonymous: true,
                    refreshToken: refreshToken)
                let user = UserBody(id: account.userID.lowercasedString, email: nil, emailConfirmed: false)
                responder.respond(.json(status: .created, UserAndSession(user: user, session: session)))
            case .failure(let failure):
                responder.respond(context.failure(failure).response)
            }
        }
    }

    // MARK: - Who am I

    private func currentUser(_ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext) {
        context.run(CurrentAccount(), as: caller, answering: responder) { result in
            switch result {
            case .success(let account?):
                let user = UserBody(id: account.userID, email: account.email, emailConfirmed: account.emailConfirmed)
                responder.respond(UserOnly(user: user).response)
            case .success(nil):
                responder.respond(Accounts.sessionRevoked.response)
            case .failure(let failure):
                responder.respond(context.failure(failure).response)
            }
        }
    }

    // MARK: - Refresh

    /// Rotates the presented token, or (the token rotated last, again within the grace
    /// window: a lost answer's retry, a concurrent refresh) answers with the successor it
    /// was rotated to, opened from what the database sealed with it.
    private func refresh(_ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext) {
        guard let body = responder.success(of: RefreshRequest.read(request)) else { return }
        let rotation = RefreshRotation(presented: body.refreshToken)
        if let refusal = accounts.refreshes.admit(rotation, from: Accounts.clientKey(request)) {
            // Held a second, as RequestsInFlight's refusals are: a flood that ignores
            // Retry-After then sends one refresh per connection per second, not thousands.
            context.loop.schedule(after: RefreshLimits.refusalHoldMilliseconds) { responder.respond(refusal.response) }
            return
        }
        let refresh = RefreshSession(rotation: rotation, graceSeconds: accounts.refreshes.graceSeconds)
        context.pool.run(refresh) { [accounts] result in
            switch result {
            case .success(.rotated(let user, let session, let device, let email, let emailConfirmed, let sealed)):
                // Sealed by this code from 32 bytes: a value that does not open is a bug.
                guard let refreshToken = sealed.map(rotation.unseal) ?? rotation.successor else {
                    return responder.respond(APIError.unexpected.response)
                }
                let tokens = accounts.session(
                    userID: user, sessionID: session, deviceID: device, isAnonymous: email == nil,
                    refreshToken: refreshToken)
                let body = UserBody(id: user.lowercasedString, email: email, emailConfirmed: emailConfirmed)
                responder.respond(.json(UserAndSession(user: body, session: tokens)))
            case .success(.reused(let session)):
                // The database revoked the session; this gateway forgets it at once too.
                if let session { accounts.refuseSession(session) }
                responder.respond(APIError.refreshTokenReused.response)
            case .success(.revoked):
                responder.respond(Accounts.sessionRevoked.response)
            case .success(.invalid):
                responder.respond(APIError.invalidRefreshToken.response)
            case .failure(let failure):
                responder.respond(context.failure(failure).response)
            }
        }
    }

    // MARK: - Link an email

    /// Counted in flight (per device and user, then per address and email) before the
    /// password is hashed, so a flood of links is refused `429` without hashing.
    private func link(_ request: HTTPRequest, _ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext) {
        guard let body = responder.success(of: LinkRequest.read(request)) else { return }
        guard caller.isAnonymous else { return responder.respond(APIError.alreadyLinked.response) }
        guard let link = responder.success(of: body.checked()) else { return }
        guard context.admit(caller, answering: responder) else { return }
        let ticket: PasswordsInFlight.Ticket
        switch accounts.passwordsInFlight.admit(address: Accounts.clientKey(request), email: link.email) {
        case .success(let admitted): ticket = admitted
        case .failure(let refusal):
            context.requests.finish(caller)
            return context.respondHeld(refusal, to: responder)
        }
        let waiting = LoopBound((responder, context), loop: responder.loop)
        accounts.passwords.hash(link.password, on: responder.loop) { hashed in
            let (responder, context) = waiting.value
            ticket.finish()
            guard case .success(let hash) = hashed else {
                context.requests.finish(caller)
                return responder.respond(APIError.signInsBusy.response)
            }
            let confirmation = accounts.requiresEmailConfirmation ? MailedCode.confirmation() : nil
            let query = LinkEmail(email: link.email, passwordHash: hash, confirmation: confirmation)
            linkEmail(query, caller, responder, context)
        }
    }

    /// With an email directory (``LoopContext/directory``) and no confirmation, the email
    /// is claimed there first (another shard's or user's: `409 email_in_use`, nothing
    /// done), then linked on this shard, then the claim marked linked
    /// (``EmailDirectory``); with confirmation, the confirmation claims it.
    private func linkEmail(_ query: LinkEmail, _ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext) {
        guard let directory = context.directory, query.confirmation == nil else {
            return linkOnShard(query, claim: nil, caller, responder, context)
        }
        directory.claim(query.email, for: caller) { outcome in
            switch outcome {
            case .claimed(let claim): linkOnShard(query, claim: claim, caller, responder, context)
            case .refused(let refusal):
                context.requests.finish(caller)
                responder.respond(refusal.response)
            }
        }
    }

    private func linkOnShard(
        _ query: LinkEmail, claim: EmailDirectory.Claim?, _ caller: Identity, _ responder: HTTPResponder,
        _ context: LoopContext
    ) {
        context.run(admitted: query, as: caller) { result in
            // The shard's answer settles the claim before the client hears it (on a
            // failure the database may have committed: the claim stays pending and
            // reconciliation settles it).
            if let claim, let directory = context.directory, case .success(let answer) = result {
                directory.settle(claim, linked: answer == .linked, confirmed: false, on: context.pool) {
                    answerLink(result, query, caller, responder, context)
                }
            } else {
                answerLink(result, query, caller, responder, context)
            }
        }
    }

    private func answerLink(
        _ result: Result<LinkEmail.Answer, QueryFailure>, _ query: LinkEmail, _ caller: Identity,
        _ responder: HTTPResponder, _ context: LoopContext
    ) {
        switch result {
        case .success(.linked):
            let user = UserBody(id: caller.userID, email: query.email, emailConfirmed: query.confirmation == nil)
            responder.respond(UserOnly(user: user).response)
        case .success(.alreadyLinked):
            responder.respond(APIError.alreadyLinked.response)
        case .success(.emailInUse):
            responder.respond(APIError.emailInUse.response)
        case .success(.revoked):
            responder.respond(Accounts.sessionRevoked.response)
        case .failure(let failure):
            responder.respond(context.failure(failure).response)
        }
    }

    // MARK: - Sign out and delete

    private func signOut(_ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext) {
        context.run(SignOut(), as: caller, answering: responder) { [accounts] result in
            switch result {
            case .success:
                // This gateway stops honouring the session now; others on the notification.
                if let session = UUID(uuidString: caller.sessionID) { accounts.refuseSession(session) }
                responder.respond(HTTPResponse(status: .noContent))
            case .failure(let failure):
                responder.respond(context.failure(failure).response)
            }
        }
    }

    private func deleteAccount(
        _ request: HTTPRequest, _ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext
    ) {
        if let refusal = DeleteRequest.refusal(of: request) { return responder.respond(refusal.response) }
        guard let directory = context.directory else {
            return deleteOnShard(releasing: nil, caller, responder, context)
        }
        // With a directory: the account's email unlinked there first (a 503, nothing
        // deleted, when it does not answer), then deleted here, then released there.
        context.run(CurrentAccount(), as: caller, answering: responder) { result in
            switch result {
            case .success(let account):
                guard let email = account?.email else {
                    return deleteOnShard(releasing: nil, caller, responder, context)
                }
                directory.unlink(email, of: caller) { unlinked in
                    guard unlinked else { return responder.respond(APIError.directoryUnavailable.response) }
                    deleteOnShard(releasing: email, caller, responder, context)
                }
            case .failure(let failure):
                responder.respond(context.failure(failure).response)
            }
        }
    }

    private func deleteOnShard(
        releasing email: String?, _ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext
    ) {
        context.run(DeleteAccount(), as: caller, answering: responder) { result in
            if let email, let directory = context.directory, case .success(.deleted) = result {
                directory.release(email, of: caller) { responder.respond(HTTPResponse(status: .noContent)) }
                return
            }
            switch result {
            case .success(.deleted): responder.respond(HTTPResponse(status: .noContent))
            case .success(.revoked): responder.respond(Accounts.sessionRevoked.response)
            case .failure(let failure): responder.respond(context.failure(failure).response)
            }
        }
    }
}
