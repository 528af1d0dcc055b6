import FerryAuth
import FerryHTTP
import FerryLoop
import FerryPostgres
import Foundation

/// PROTOCOL.md's Accounts section: anonymous sign-up, who am I, refresh, link,
/// sign-in with the first-sign-in choice, sign-out and account deletion.
struct AccountRoutes {
    let accounts: Accounts

    /// Adds the routes for one loop; handlers use that loop's `context`.
    func register(in router: inout Router, context: LoopContext) {
        let accounts = self.accounts
        router.post("/v1/auth/anonymous") { request, responder in
            Self.signUpAnonymous(request, responder, context, accounts)
        }
        router.get("/v1/auth/user") { request, responder in
            Self.currentUser(request, responder, context, accounts)
        }
        router.post("/v1/auth/refresh") { request, responder in
            Self.refresh(request, responder, context, accounts)
        }
        router.post("/v1/auth/link") { request, responder in
            Self.link(request, responder, context, accounts)
        }
        router.post("/v1/auth/signin") { request, responder in
            Self.signIn(request, responder, context, accounts)
        }
        router.post("/v1/auth/signout") { request, responder in
            Self.signOut(request, responder, context, accounts)
        }
        router.delete("/v1/account") { request, responder in
            Self.deleteAccount(request, responder, context, accounts)
        }
    }

    // MARK: Anonymous sign-up

    private struct DeviceRequest: Decodable {
        var deviceID: String
        enum CodingKeys: String, CodingKey { case deviceID = "device_id" }
    }

    private static func signUpAnonymous(
        _ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext, _ accounts: Accounts
    ) {
        if case .denied(let retryAfter) = accounts.anonymousSignUps.admit(clientKey(request)) {
            let limit = "too many anonymous sign-ups from this address (\(accounts.anonymousSignUps.limit) per hour)"
            return responder.respond(APIError.rateLimited(retryAfterSeconds: retryAfter, limit: limit).response)
        }
        guard let body = responder.success(of: RequestBody.decode(DeviceRequest.self, from: request)) else { return }
        guard let device = deviceID(body.deviceID) else {
            return responder.respond(APIError.invalidRequest("device_id must be a UUID").response)
        }
        let refreshToken = RefreshToken.generate()
        let statement = PostgresStatement(
            "select user_id, session_id from ferry.sign_up_anonymous($1, $2)",
            [device, RefreshToken.hash(refreshToken)], preparedName: "ferry_sign_up_anonymous")
        context.pool.query(statement) { result in
            guard case .success(let rows) = result, rows.count == 1,
                let user = rows[0, 0].flatMap(UUID.init(uuidString:)),
                let session = rows[0, 1].flatMap(UUID.init(uuidString:))
            else {
                return responder.respond(failure(result, context).response)
            }
            let answer = UserAndSession(
                user: UserBody(id: user.lowercasedString, email: nil),
                session: accounts.session(
                    userID: user, sessionID: session, deviceID: device, isAnonymous: true, refreshToken: refreshToken))
            responder.respond(.json(status: .created, answer))
        }
    }

    // MARK: Who am I

    private static func currentUser(
        _ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext, _ accounts: Accounts
    ) {
        guard let identity = responder.success(of: accounts.authenticate(request)) else { return }
        let statement = PostgresStatement(
            "select user_id, email from ferry.current_account()", preparedName: "ferry_current_account")
        context.run(as: identity, [statement], answering: responder) { result in
            guard case .success(let results) = result else {
                return responder.respond(failure(result, context).response)
            }
            guard results[0].count == 1, let id = results[0][0, 0] else {
                return responder.respond(Accounts.sessionRevoked.response)
            }
            responder.respond(UserOnly(user: UserBody(id: id, email: results[0][0, 1])).response)
        }
    }

    // MARK: Refresh

    private struct RefreshRequest: Decodable {
        var refreshToken: String
        enum CodingKeys: String, CodingKey { case refreshToken = "refresh_token" }
    }

    private static func refresh(
        _ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext, _ accounts: Accounts
    ) {
        guard let body = responder.success(of: RequestBody.decode(RefreshRequest.self, from: request)) else { return }
        let newToken = RefreshToken.generate()
        let statement = PostgresStatement(
            "select status, user_id, session_id, device_id, email from ferry.refresh_session($1, $2)",
            [RefreshToken.hash(body.refreshToken), RefreshToken.hash(newToken)],
            preparedName: "ferry_refresh_session")
        context.pool.query(statement) { result in
            guard case .success(let rows) = result, rows.count == 1 else {
                return responder.respond(failure(result, context).response)
            }
            switch rows[0, 0] {
            case "ok":
                guard let user = rows[0, 1].flatMap(UUID.init(uuidString:)),
                    let session = rows[0, 2].flatMap(UUID.init(uuidString:)), let device = rows[0, 3]
                else { return responder.respond(APIError.unexpected.response) }
                let email = rows[0, 4]
                responder.respond(
                    .json(
                        UserAndSession(
                            user: UserBody(id: user.lowercasedString, email: email),
                            session: accounts.session(
                                userID: user, sessionID: session, deviceID: device, isAnonymous: email == nil,
                                refreshToken: newToken))))
            case "reused":
                // The database revoked the session; this gateway forgets it at once too.
                if let session = rows[0, 2].flatMap(UUID.init(uuidString:)) { accounts.refuseSession(session) }
                responder.respond(
                    APIError(
                        status: 401, code: "refresh_token_reused",
                        message: "this refresh token was already used; the session is revoked"
                    ).response)
            case "revoked":
                responder.respond(Accounts.sessionRevoked.response)
            default:
                responder.respond(APIError.unauthorized("the refresh token is not valid").response)
            }
        }
    }

    // MARK: Link an email

    private struct Credentials: Decodable {
        var email: String
        var password: String
    }

    private static func link(
        _ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext, _ accounts: Accounts
    ) {
        guard let identity = responder.success(of: accounts.authenticate(request)) else { return }
        guard let body = responder.success(of: RequestBody.decode(Credentials.self, from: request)) else { return }
        guard identity.isAnonymous else {
            return responder.respond(alreadyLinked.response)
        }
        guard let email = EmailAddress.normalize(body.email) else {
            return responder.respond(invalidEmail.response)
        }
        guard PasswordPolicy.isAcceptable(body.password) else {
            return responder.respond(weakPassword.response)
        }
        let answer = LoopBound(responder, loop: responder.loop)
        let loopContext = LoopBound(context, loop: responder.loop)
        accounts.passwords.hash(body.password, on: responder.loop) { hashed in
            let responder = answer.value
            guard case .success(let hash) = hashed else {
                return responder.respond(busy.response)
            }
            let statement = PostgresStatement(
                "select ferry.link_email($1, $2)", [email, hash], preparedName: "ferry_link_email")
            loopContext.value.run(as: identity, [statement], answering: responder) { result in
                guard case .success(let results) = result else {
                    return responder.respond(failure(result, loopContext.value).response)
                }
                switch results[0][0, 0] {
                case "ok":
                    responder.respond(UserOnly(user: UserBody(id: identity.userID, email: email)).response)
                case "already_linked":
                    responder.respond(alreadyLinked.response)
                case "email_in_use":
                    responder.respond(emailInUse.response)
                default:
                    responder.respond(Accounts.sessionRevoked.response)
                }
            }
        }
    }

    // MARK: Sign in

    private struct SignInRequest: Decodable {
        var email: String
        var password: String
        var deviceID: String
        var resolve: String?
        enum CodingKeys: String, CodingKey {
            case email, password
            case deviceID = "device_id"
            case resolve
        }
    }

    private static func signIn(
        _ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext, _ accounts: Accounts
    ) {
        guard let body = responder.success(of: RequestBody.decode(SignInRequest.self, from: request)) else { return }
        guard let device = deviceID(body.deviceID) else {
            return responder.respond(APIError.invalidRequest("device_id must be a UUID").response)
        }
        guard body.resolve == nil || body.resolve == "keep_cloud" || body.resolve == "keep_device" else {
            return responder.respond(APIError.invalidRequest("resolve must be keep_cloud or keep_device").response)
        }
        // The device's current anonymous session, when it sends one, decides what
        // happens to the rows it made before signing in.
        let anonymousUser: String?
        switch request.headers["Authorization"].map({ _ in accounts.authenticate(request) }) {
        case .none: anonymousUser = nil
        case .failure(let error): return responder.respond(error.response)
        case .success(let caller): anonymousUser = caller.isAnonymous ? caller.userID : nil
        }
        let email = EmailAddress.normalize(body.email) ?? body.email.lowercased()
        let address = clientKey(request)
        let limits = [
            (accounts.failedSignInsByEmail, email, "for this email"),
            (accounts.failedSignInsByAddress, address, "from this address"),
        ]
        for (limiter, key, whose) in limits {
            if case .denied(let retryAfter) = limiter.check(key) {
                let limit = "too many failed sign-ins \(whose) (\(limiter.limit) per hour)"
                return responder.respond(APIError.rateLimited(retryAfterSeconds: retryAfter, limit: limit).response)
            }
        }
        let lookup = PostgresStatement(
            "select user_id, password_hash from ferry.find_credentials($1)", [email],
            preparedName: "ferry_find_credentials")
        let answer = LoopBound(responder, loop: responder.loop)
        let loopContext = LoopBound(context, loop: responder.loop)
        let rejected: @Sendable () -> Void = {
            _ = accounts.failedSignInsByEmail.admit(email)
            _ = accounts.failedSignInsByAddress.admit(address)
            answer.value.respond(
                APIError(status: 401, code: "invalid_credentials", message: "wrong email or password").response)
        }
        context.pool.query(lookup) { result in
            guard case .success(let rows) = result else {
                return responder.respond(failure(result, context).response)
            }
            guard rows.count == 1, let user = rows[0, 0], let hash = rows[0, 1] else {
                // Same work as a real check, so a missing account answers no faster.
                accounts.passwords.verifyForUnknownAccount(body.password, on: responder.loop) { _ in rejected() }
                return
            }
            accounts.passwords.verify(body.password, against: hash, on: responder.loop) { verified in
                let responder = answer.value
                switch verified {
                case .failure: return responder.respond(busy.response)
                case .success(false): return rejected()
                case .success(true): break
                }
                let refreshToken = RefreshToken.generate()
                let signIn = PostgresStatement(
                    """
                    select status, session_id, email, reset, device_rows, cloud_rows
                    from ferry.sign_in($1, $2, $3, $4, $5)
                    """,
                    [user, device, RefreshToken.hash(refreshToken), anonymousUser, body.resolve],
                    preparedName: "ferry_sign_in")
                loopContext.value.pool.query(signIn) { result in
                    guard case .success(let rows) = result, rows.count == 1 else {
                        return responder.respond(failure(result, loopContext.value).response)
                    }
                    if rows[0, 0] == "resolution_required" {
                        return responder.respond(
                            APIError(
                                status: 409, code: "resolution_required",
                                message:
                                    "this device has rows of its own: sign in again with resolve keep_cloud or keep_device",
                                details: [
                                    ("device_rows", .integer(Int(rows[0, 4] ?? "") ?? 0)),
                                    ("cloud_rows", .integer(Int(rows[0, 5] ?? "") ?? 0)),
                                ]
                            ).response)
                    }
                    guard let userID = UUID(uuidString: user), let session = rows[0, 1].flatMap(UUID.init(uuidString:))
                    else { return responder.respond(APIError.unexpected.response) }
                    responder.respond(
                        .json(
                            SignInAnswer(
                                user: UserBody(id: user, email: rows[0, 2]),
                                session: accounts.session(
                                    userID: userID, sessionID: session, deviceID: device, isAnonymous: false,
                                    refreshToken: refreshToken),
                                reset: rows[0, 3] == "t")))
                }
            }
        }
    }

    // MARK: Sign out and delete

    private static func signOut(
        _ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext, _ accounts: Accounts
    ) {
        guard let identity = responder.success(of: accounts.authenticate(request)) else { return }
        let statement = PostgresStatement("select ferry.sign_out()", preparedName: "ferry_sign_out")
        context.run(as: identity, [statement], answering: responder) { result in
            guard case .success = result else { return responder.respond(failure(result, context).response) }
            // This gateway stops honouring the session now; others on the notification.
            if let session = UUID(uuidString: identity.sessionID) { accounts.refuseSession(session) }
            responder.respond(HTTPResponse(status: .noContent))
        }
    }

    private struct DeleteRequest: Decodable {
        var confirm: String?
    }

    private static func deleteAccount(
        _ request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext, _ accounts: Accounts
    ) {
        // A retry after a lost answer carries a token whose session the deletion revoked:
        // the database, not the cache, decides (a deleted user answers 204 again).
        guard let identity = responder.success(of: accounts.authenticate(request, checkRevocation: false)) else {
            return
        }
        // A body that is not JSON is invalid_json, as on every route; JSON that is not the
        // confirmation, or none, is confirmation_required.
        if !request.body.isEmpty, let refusal = RequestBody.refusal(of: request.body) {
            return responder.respond(refusal.response)
        }
        guard case .success(let body) = RequestBody.decode(DeleteRequest.self, from: request),
            body.confirm == "DELETE"
        else {
            return responder.respond(
                APIError(
                    status: 400, code: "confirmation_required",
                    message: #"send {"confirm": "DELETE"} to delete this account and all its data"#
                ).response)
        }
        let statement = PostgresStatement("select ferry.delete_account()", preparedName: "ferry_delete_account")
        context.run(as: identity, [statement], answering: responder) { result in
            guard case .success(let results) = result else {
                return responder.respond(failure(result, context).response)
            }
            guard results[0][0, 0] == "ok" else { return responder.respond(Accounts.sessionRevoked.response) }
            responder.respond(HTTPResponse(status: .noContent))
        }
    }

    // MARK: - Shared answers

    private static let alreadyLinked = APIError(
        status: 409, code: "already_linked", message: "this account already has an email")
    private static let emailInUse = APIError(
        status: 409, code: "email_in_use", message: "another account uses this email")
    private static let invalidEmail = APIError(status: 400, code: "invalid_email", message: "not a valid email address")
    private static let weakPassword = APIError(
        status: 400, code: "weak_password",
        message: "the password needs at least \(PasswordPolicy.minimumCharacters) characters")
    private static let busy = APIError(status: 503, code: "unavailable", message: "too many sign-ins at once; retry")

    /// The rate-limit key of a client: its address without the port.
    private static func clientKey(_ request: HTTPRequest) -> String {
        guard let address = request.remoteAddress, let colon = address.lastIndex(of: ":") else { return "unknown" }
        return String(address[..<colon])
    }

    /// A device id as stored: a UUID, lowercased.
    private static func deviceID(_ text: String) -> String? {
        UUID(uuidString: text).map { $0.lowercasedString }
    }

    /// The error for a failed database call (logged), or for an answer of the wrong shape.
    private static func failure<T>(_ result: Result<T, PostgresError>, _ context: LoopContext) -> APIError {
        guard case .failure(let error) = result else {
            context.logger.log(.error, "unexpected answer from the database")
            return .unexpected
        }
        return context.databaseFailure(error)
    }
}
