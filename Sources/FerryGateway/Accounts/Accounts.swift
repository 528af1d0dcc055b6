import FerryAuth
import FerryHTTP
import Foundation

/// The process's account service: token signing and checking (with the verified-token
/// and revoked-session caches), password hashing and the limits of sign-ups, sign-ins and
/// password hashes. One per process, shared by every loop: the account routes use all of it,
/// and every other route and stream asks it who is asking (``authenticate(_:allowQueryToken:checkRevocation:)``).
/// Safe from any thread.
final class Accounts: Sendable {
    let tokens: AccessTokenSigner
    let passwords: PasswordHasher
    let revoked: RevokedSessions
    let verifiedTokens = VerifiedTokenCache()
    let anonymousSignUps: RateLimiter
    let refreshes: RefreshLimits
    let recoveryRequestsByEmail: RateLimiter
    let recoveryRequestsByAddress: RateLimiter
    /// Whether an SMTP relay is configured, so that codes can be mailed.
    let sendsMail: Bool
    /// Whether a linked email must be confirmed (FERRY_EMAIL_CONFIRMATION=required).
    let requiresEmailConfirmation: Bool
    /// What every password check (sign-in, password change, reset) is reserved against,
    /// in PostgreSQL.
    let signInLimits: SignInLimits
    /// Password hashes in flight per client address and per email.
    let passwordsInFlight: PasswordsInFlight
    let logger: Logger
    /// Forwards sign-ins to the shard the email directory names, when `--shard-urls` and
    /// `--directory-database-url` are set.
    let forwarder: ShardForwarder?

    init(configuration: GatewayConfiguration, logger: Logger) {
        forwarder =
            configuration.shardURLs.isEmpty || configuration.directoryDatabaseURL == nil
            ? nil : ShardForwarder(urls: configuration.shardURLs)
        tokens = AccessTokenSigner(
            secret: configuration.jwtSecret, previousSecret: configuration.jwtPreviousSecret,
            lifetimeSeconds: configuration.accessTokenSeconds, leewaySeconds: configuration.tokenLeewaySeconds)
        passwords = PasswordHasher()
        revoked = RevokedSessions()
        anonymousSignUps = RateLimiter(limit: configuration.anonymousSignUpsPerHour, windowSeconds: 3600)
        refreshes = RefreshLimits(configuration)
        recoveryRequestsByEmail = RateLimiter(limit: configuration.recoveryRequestsPerHour, windowSeconds: 3600)
        recoveryRequestsByAddress = RateLimiter(limit: configuration.recoveryRequestsPerHour, windowSeconds: 3600)
        sendsMail = configuration.smtpURL != nil
        requiresEmailConfirmation = configuration.requiresEmailConfirmation
        signInLimits = SignInLimits(
            failedPerHour: configuration.failedSignInsPerHour,
            signInsPerAccountPerHour: configuration.signInsPerAccountPerHour)
        passwordsInFlight = PasswordsInFlight(
            perAddress: configuration.passwordHashesPerAddress, perEmail: configuration.passwordHashesPerEmail)
        self.logger = logger
    }

    // MARK: - Authentication

    /// The caller of `request`, from its bearer token (or `?access_token=` when
    /// `allowQueryToken`, for streams). Costs no database round trip: signature, times
    /// and the revoked-session cache decide.
    func authenticate(
        _ request: HTTPRequest, allowQueryToken: Bool = false, checkRevocation: Bool = true
    ) -> Result<Identity, APIError> {
        verifiedToken(request, allowQueryToken: allowQueryToken, checkRevocation: checkRevocation).map(\.identity)
    }

    /// The verified claims of a stream's access token, from its `Authorization` header or
    /// `?access_token=`, with revocation checked. A token is looked up in
    /// ``verifiedTokens`` but not remembered there (see ``verifiedToken(token:checkRevocation:remember:)``).
    func streamClaims(_ request: HTTPRequest) -> Result<AccessTokenClaims, APIError> {
        verifiedToken(request, allowQueryToken: true, checkRevocation: true, remember: false).map(\.claims)
    }

    /// The claims of a stream's in-band `auth` token if its signature and times are good
    /// and its session is not revoked; else why not (the stream closes with its own code
    /// for each). Not remembered, as ``streamClaims(_:)``.
    func streamClaims(token: Substring) -> Result<AccessTokenClaims, TokenRefusal> {
        verifiedToken(token: token, checkRevocation: true, remember: false).map(\.claims)
    }

    private func verifiedToken(
        _ request: HTTPRequest, allowQueryToken: Bool, checkRevocation: Bool, remember: Bool = true
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
        return verifiedToken(token: token, checkRevocation: checkRevocation, remember: remember).mapError(\.answer)
    }

    /// A token seen recently is found in ``verifiedTokens`` and only its times are
    /// checked again; any other is verified in full and, when `remember`, kept if good.
    ///
    /// Streams do not remember theirs: a stream checks its token once, when it opens
    /// (and once per in-band renewal), so a slot would serve it nothing while it is
    /// open, and 50,000 streams opening would push out the tokens of the devices
    /// sending requests. The cache's ~650 B a slot is also most of what an idle SSE
    /// stream cost the process (bench/RESULTS.md, "Idle stream memory"). A device's
    /// next request with the same token verifies it in full once and keeps it.
    func verifiedToken(
        token: Substring, checkRevocation: Bool = true, remember: Bool = true
    ) -> Result<VerifiedToken, TokenRefusal> {
        let now = Int(Date().timeIntervalSince1970)
        let checked: Result<VerifiedToken, AccessTokenError>
        if let cached = verifiedTokens.lookup(token) {
            checked = tokens.checkTimes(of: cached.claims, now: now).map { .failure($0) } ?? .success(cached)
        } else {
            checked = tokens.verify(token, now: now).map(VerifiedToken.init(claims:))
            if remember, case .success(let verified) = checked { verifiedTokens.insert(token, verified) }
        }
        switch checked {
        case .failure(.expired):
            return .failure(.expired)
        case .failure:
            return .failure(.invalid)
        case .success(let verified):
            if checkRevocation && revoked.isRevoked(verified.claims.sessionID) { return .failure(.revoked) }
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

    /// Why a presented access token is not accepted.
    enum TokenRefusal: Error, Equatable {
        /// Signed by us, but past its end (`401 token_expired`: the client refreshes).
        case expired
        /// Not a token this server signed, or issued in the future (`401 unauthorized`).
        case invalid
        /// Its session was revoked (`401 session_revoked`).
        case revoked

        /// The answer to a request that presented it.
        var answer: APIError {
            switch self {
            case .expired: APIError(status: 401, code: "token_expired", message: "the access token has expired")
            case .invalid: .unauthorized("the access token is not valid")
            case .revoked: Accounts.sessionRevoked
            }
        }
    }

    /// A session body for a user's new tokens; `refreshToken` is sent with the user's
    /// shard prefix (``RefreshToken/issued(_:shard:)``).
    func session(userID: UUID, sessionID: UUID, deviceID: String, isAnonymous: Bool, refreshToken: String)
        -> SessionBody
    {
        let claims = tokens.claims(
            userID: userID, sessionID: sessionID, deviceID: deviceID, isAnonymous: isAnonymous)
        return SessionBody(
            accessToken: tokens.sign(claims), refreshToken: RefreshToken.issued(refreshToken, shard: Shard.of(userID)),
            expiresIn: tokens.lifetimeSeconds)
    }
}
