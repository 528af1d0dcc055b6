import FerryAuth
import FerryHTTP
import FerryJSON
import FerryLoop
import FerryPostgres
import Foundation

/// What every loop's account handlers share: token signing, password hashing, rate
/// limits and the revoked-session cache. Safe from any thread.
final class Accounts: Sendable {
    let tokens: AccessTokenSigner
    let passwords: PasswordHasher
    let revoked: RevokedSessions
    let verifiedTokens = VerifiedTokenCache()
    let anonymousSignUps: RateLimiter
    let failedSignInsByEmail: RateLimiter
    let failedSignInsByAddress: RateLimiter
    let logger: Logger

    init(configuration: GatewayConfiguration, logger: Logger) {
        tokens = AccessTokenSigner(
            secret: configuration.jwtSecret, previousSecret: configuration.jwtPreviousSecret,
            lifetimeSeconds: configuration.accessTokenSeconds, leewaySeconds: configuration.tokenLeewaySeconds)
        passwords = PasswordHasher()
        revoked = RevokedSessions()
        anonymousSignUps = RateLimiter(limit: configuration.anonymousSignUpsPerHour, windowSeconds: 3600)
        failedSignInsByEmail = RateLimiter(limit: configuration.failedSignInsPerHour, windowSeconds: 3600)
        failedSignInsByAddress = RateLimiter(limit: configuration.failedSignInsPerHour, windowSeconds: 3600)
        self.logger = logger
    }

    /// How long a revoked session must stay in the cache: until every access token
    /// issued for it has expired.
    var revocationHorizonSeconds: Int { tokens.lifetimeSeconds + tokens.leewaySeconds }

    // MARK: - Authentication

    /// The caller of `request`, from its bearer token (or `?access_token=` when
    /// `allowQueryToken`, for streams). Costs no database round trip: signature, times
    /// and the revoked-session cache decide.
    func authenticate(
        _ request: HTTPRequest, allowQueryToken: Bool = false, checkRevocation: Bool = true
    ) -> Result<Identity, APIError> {
        verifiedToken(request, allowQueryToken: allowQueryToken, checkRevocation: checkRevocation).map(\.identity)
    }

    /// The verified claims of `request`'s access token (see ``authenticate(_:allowQueryToken:checkRevocation:)``).
    func verifiedClaims(
        _ request: HTTPRequest, allowQueryToken: Bool = false, checkRevocation: Bool = true
    ) -> Result<AccessTokenClaims, APIError> {
        verifiedToken(request, allowQueryToken: allowQueryToken, checkRevocation: checkRevocation).map(\.claims)
    }

    /// The claims of an access token if its signature and times are good and its
    /// session is not revoked (when `checkRevocation`).
    func verifiedClaims(token: Substring, checkRevocation: Bool = true) -> Result<AccessTokenClaims, APIError> {
        verifiedToken(token: token, checkRevocation: checkRevocation).map(\.claims)
    }

    private func verifiedToken(
        _ request: HTTPRequest, allowQueryToken: Bool, checkRevocation: Bool
    ) -> Result<VerifiedToken, APIError> {
        var token: Substring?
        if let header = request.headers["Authorization"] {
            guard let bearer = Self.bearerToken(in: header) else {
                return .failure(.unauthorized("the Authorization header must be: Bearer <access_token>"))
            }
            token = bearer
        } else if allowQueryToken {
            do {
                token = try request.queryParameter("access_token").map { Substring($0) }
            } catch {
                return .failure(.invalidRequest("query parameter \(error)"))
            }
        }
        guard let token else { return .failure(.unauthorized("an access token is required")) }
        return verifiedToken(token: token, checkRevocation: checkRevocation)
    }

    /// A token seen recently is found in ``verifiedTokens`` and only its times are
    /// checked again; any other is verified in full and remembered if good.
    private func verifiedToken(token: Substring, checkRevocation: Bool) -> Result<VerifiedToken, APIError> {
        let now = Int(Date().timeIntervalSince1970)
        let checked: Result<VerifiedToken, AccessTokenError>
        if let cached = verifiedTokens.lookup(token) {
            checked = tokens.checkTimes(of: cached.claims, now: now).map { .failure($0) } ?? .success(cached)
        } else {
            checked = tokens.verify(token, now: now).map(VerifiedToken.init(claims:))
            if case .success(let verified) = checked { verifiedTokens.insert(token, verified) }
        }
        switch checked {
        case .failure(.expired):
            return .failure(APIError(status: 401, code: "token_expired", message: "the access token has expired"))
        case .failure:
            return .failure(.unauthorized("the access token is not valid"))
        case .success(let verified):
            if checkRevocation && revoked.isRevoked(verified.claims.sessionID) {
                return .failure(Self.sessionRevoked)
            }
            return .success(verified)
        }
    }

    /// The token of an `Authorization` value `Bearer <token>`: the scheme in any case
    /// (RFC 9110 §11.1), then one or more spaces. Nil for any other shape.
    static func bearerToken(in header: String) -> Substring? {
        let utf8 = header.utf8
        var index = utf8.startIndex
        for expected in "bearer".utf8 {
            // `| 0x20` lowercases ASCII letters; only `B` and `b` become `b`, and so on.
            guard index < utf8.endIndex, utf8[index] | 0x20 == expected else { return nil }
            index = utf8.index(after: index)
        }
        guard index < utf8.endIndex, utf8[index] == UInt8(ascii: " ") else { return nil }
        while index < utf8.endIndex, utf8[index] == UInt8(ascii: " ") { index = utf8.index(after: index) }
        guard index < utf8.endIndex else { return nil }
        return header[index...]
    }

    static let sessionRevoked = APIError(status: 401, code: "session_revoked", message: "the session was revoked")

    /// Logs a failed database call and returns what the client is told.
    func databaseFailure(_ error: PostgresError) -> APIError {
        let answer = APIError.database(error)
        // A refusal of the client's own data is the client's to fix; the rest is ours.
        logger.log(answer.status.code >= 500 ? .error : .warning, "database error", ["error": error.description])
        return answer
    }

    /// A session body for a user's new tokens.
    func session(userID: UUID, sessionID: UUID, deviceID: String, isAnonymous: Bool, refreshToken: String)
        -> SessionBody
    {
        let claims = tokens.claims(
            userID: userID, sessionID: sessionID, deviceID: deviceID, isAnonymous: isAnonymous)
        return SessionBody(
            accessToken: tokens.sign(claims), refreshToken: refreshToken, expiresIn: tokens.lifetimeSeconds)
    }

    /// Forgets sessions revoked by any gateway: called with each `ferry_revoked`
    /// notification's payload. Returns the revocation, for closing the session's streams.
    @discardableResult
    func noteRevocation(payload: String) -> Revocation? {
        guard let data = payload.data(using: .utf8),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let text = object["session"] as? String, let session = UUID(uuidString: text)
        else {
            logger.log(.warning, "unreadable revocation notification", ["payload": payload])
            return nil
        }
        revoked.revoke(session, until: Int(Date().timeIntervalSince1970) + revocationHorizonSeconds)
        return Revocation(
            sessionID: session, userID: (object["user"] as? String).flatMap(UUID.init(uuidString:)),
            reason: object["reason"] as? String ?? "")
    }
}

/// A session revoked by sign-out, token reuse or account deletion (`ferry_revoked`).
struct Revocation: Sendable {
    var sessionID: UUID
    var userID: UUID?
    /// `signed_out`, `token_reused` or `account_deleted` (0002's `announce_revocation` callers).
    var reason: String
}

// MARK: - Bodies

/// `{"id", "is_anonymous", "email"}`.
struct UserBody: Encodable {
    var id: String
    var email: String?
    var isAnonymous: Bool { email == nil }

    enum CodingKeys: String, CodingKey {
        case id
        case isAnonymous = "is_anonymous"
        case email
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(isAnonymous, forKey: .isAnonymous)
        // Present as null for anonymous users, never left out.
        try container.encode(email, forKey: .email)
    }
}

/// `{"access_token", "refresh_token", "token_type": "bearer", "expires_in"}`.
struct SessionBody: Encodable {
    var accessToken: String
    var refreshToken: String
    var tokenType = "bearer"
    var expiresIn: Int

    enum CodingKeys: String, CodingKey {
        case accessToken = "access_token"
        case refreshToken = "refresh_token"
        case tokenType = "token_type"
        case expiresIn = "expires_in"
    }
}

private struct UserAndSession: Encodable {
    var user: UserBody
    var session: SessionBody
}

private struct SignInAnswer: Encodable {
    var user: UserBody
    var session: SessionBody
    var reset: Bool
}

/// `{"user": {…}}`, written by hand: `GET /v1/auth/user` is the cheapest authenticated
/// request, and `JSONEncoder` cost about 14 % of the gateway's CPU time on it (perf,
/// bench/auth.sh). The same fields as ``UserBody``'s `Encodable` form, in its order
/// (`JSONEncoder` on Linux does not keep any).
private struct UserOnly {
    var user: UserBody

    var response: HTTPResponse {
        var body: [UInt8] = []
        body.reserveCapacity(96 + (user.email?.utf8.count ?? 0))
        body.append(contentsOf: #"{"user":{"id":"#.utf8)
        JSONString.append(user.id, to: &body)
        body.append(contentsOf: (user.isAnonymous ? #","is_anonymous":true"# : #","is_anonymous":false"#).utf8)
        body.append(contentsOf: #","email":"#.utf8)
        if let email = user.email {
            JSONString.append(email, to: &body)
        } else {
            body.append(contentsOf: "null".utf8)
        }
        body.append(contentsOf: "}}".utf8)
        return .json(bytes: body)
    }
}

// MARK: - Routes

/// PROTOCOL.md's Accounts section: anonymous sign-up, who am I, refresh, link,
/// sign-in with the first-sign-in choice, sign-out and account deletion.
struct AccountRoutes {
    let accounts: Accounts

    /// Adds the routes for one loop; handlers use that loop's `worker`.
    func register(in router: inout Router, worker: Worker) {
        let accounts = self.accounts
        router.post("/v1/auth/anonymous") { request, responder in
            Self.signUpAnonymous(request, responder, worker, accounts)
        }
        router.get("/v1/auth/user") { request, responder in
            Self.currentUser(request, responder, worker, accounts)
        }
        router.post("/v1/auth/refresh") { request, responder in
            Self.refresh(request, responder, worker, accounts)
        }
        router.post("/v1/auth/link") { request, responder in
            Self.link(request, responder, worker, accounts)
        }
        router.post("/v1/auth/signin") { request, responder in
            Self.signIn(request, responder, worker, accounts)
        }
        router.post("/v1/auth/signout") { request, responder in
            Self.signOut(request, responder, worker, accounts)
        }
        router.delete("/v1/account") { request, responder in
            Self.deleteAccount(request, responder, worker, accounts)
        }
    }

    // MARK: Anonymous sign-up

    private struct DeviceRequest: Decodable {
        var deviceID: String
        enum CodingKeys: String, CodingKey { case deviceID = "device_id" }
    }

    private static func signUpAnonymous(
        _ request: HTTPRequest, _ responder: HTTPResponder, _ worker: Worker, _ accounts: Accounts
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
        worker.pool.query(statement) { result in
            guard case .success(let rows) = result, rows.count == 1,
                let user = rows[0, 0].flatMap(UUID.init(uuidString:)),
                let session = rows[0, 1].flatMap(UUID.init(uuidString:))
            else {
                return responder.respond(failure(result, accounts).response)
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
        _ request: HTTPRequest, _ responder: HTTPResponder, _ worker: Worker, _ accounts: Accounts
    ) {
        guard let identity = responder.success(of: accounts.authenticate(request)) else { return }
        let statement = PostgresStatement(
            "select user_id, email from ferry.current_account()", preparedName: "ferry_current_account")
        worker.run(as: identity, [statement], answering: responder) { result in
            guard case .success(let results) = result else {
                return responder.respond(failure(result, accounts).response)
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
        _ request: HTTPRequest, _ responder: HTTPResponder, _ worker: Worker, _ accounts: Accounts
    ) {
        guard let body = responder.success(of: RequestBody.decode(RefreshRequest.self, from: request)) else { return }
        let newToken = RefreshToken.generate()
        let statement = PostgresStatement(
            "select status, user_id, session_id, device_id, email from ferry.refresh_session($1, $2)",
            [RefreshToken.hash(body.refreshToken), RefreshToken.hash(newToken)],
            preparedName: "ferry_refresh_session")
        worker.pool.query(statement) { result in
            guard case .success(let rows) = result, rows.count == 1 else {
                return responder.respond(failure(result, accounts).response)
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
                if let session = rows[0, 2].flatMap(UUID.init(uuidString:)) {
                    accounts.revoked.revoke(
                        session, until: Int(Date().timeIntervalSince1970) + accounts.revocationHorizonSeconds)
                }
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
        _ request: HTTPRequest, _ responder: HTTPResponder, _ worker: Worker, _ accounts: Accounts
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
        let loopWorker = LoopBound(worker, loop: responder.loop)
        accounts.passwords.hash(body.password, on: responder.loop) { hashed in
            let responder = answer.value
            guard case .success(let hash) = hashed else {
                return responder.respond(busy.response)
            }
            let statement = PostgresStatement(
                "select ferry.link_email($1, $2)", [email, hash], preparedName: "ferry_link_email")
            loopWorker.value.run(as: identity, [statement], answering: responder) { result in
                guard case .success(let results) = result else {
                    return responder.respond(failure(result, accounts).response)
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
        _ request: HTTPRequest, _ responder: HTTPResponder, _ worker: Worker, _ accounts: Accounts
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
        let loopWorker = LoopBound(worker, loop: responder.loop)
        let rejected: @Sendable () -> Void = {
            _ = accounts.failedSignInsByEmail.admit(email)
            _ = accounts.failedSignInsByAddress.admit(address)
            answer.value.respond(
                APIError(status: 401, code: "invalid_credentials", message: "wrong email or password").response)
        }
        worker.pool.query(lookup) { result in
            guard case .success(let rows) = result else {
                return responder.respond(failure(result, accounts).response)
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
                loopWorker.value.pool.query(signIn) { result in
                    guard case .success(let rows) = result, rows.count == 1 else {
                        return responder.respond(failure(result, accounts).response)
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
        _ request: HTTPRequest, _ responder: HTTPResponder, _ worker: Worker, _ accounts: Accounts
    ) {
        guard let identity = responder.success(of: accounts.authenticate(request)) else { return }
        let statement = PostgresStatement("select ferry.sign_out()", preparedName: "ferry_sign_out")
        worker.run(as: identity, [statement], answering: responder) { result in
            guard case .success = result else { return responder.respond(failure(result, accounts).response) }
            // This gateway stops honouring the session now; others on the notification.
            if let session = UUID(uuidString: identity.sessionID) {
                accounts.revoked.revoke(
                    session, until: Int(Date().timeIntervalSince1970) + accounts.revocationHorizonSeconds)
            }
            responder.respond(HTTPResponse(status: .noContent))
        }
    }

    private struct DeleteRequest: Decodable {
        var confirm: String?
    }

    private static func deleteAccount(
        _ request: HTTPRequest, _ responder: HTTPResponder, _ worker: Worker, _ accounts: Accounts
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
        worker.run(as: identity, [statement], answering: responder) { result in
            guard case .success(let results) = result else {
                return responder.respond(failure(result, accounts).response)
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
    private static func failure<T>(_ result: Result<T, PostgresError>, _ accounts: Accounts) -> APIError {
        guard case .failure(let error) = result else {
            accounts.logger.log(.error, "unexpected answer from the database")
            return .unexpected
        }
        return accounts.databaseFailure(error)
    }
}
