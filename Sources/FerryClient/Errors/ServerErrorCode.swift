extension ServerError {
    /// A protocol error code, typed: `error.errorCode == .emailInUse`.
    ///
    /// Every code the protocol lists has a name here. A code this SDK does not name (a
    /// newer server's) is still a ``Code``, equal to one made from its text, so an app
    /// can match it before the SDK names it. Whether a failure may be retried is not the
    /// code's to say but the status's (``ServerError/retryable``): every 5xx and 429 is.
    public struct Code: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
        /// The code as the server writes it (`email_in_use`).
        public let rawValue: String

        /// The code `rawValue`, named here or not.
        public init(rawValue: String) { self.rawValue = rawValue }

        public init(stringLiteral value: String) { rawValue = value }

        public var description: String { rawValue }

        // MARK: - 400

        /// `400`: the request does not have the protocol's shape.
        public static let invalidRequest: Code = "invalid_request"
        /// `400`: the body is not JSON.
        public static let invalidJSON: Code = "invalid_json"
        /// `400`: a pull's cursor does not parse.
        public static let invalidCursor: Code = "invalid_cursor"
        /// `400`: the email is not an email address.
        public static let invalidEmail: Code = "invalid_email"
        /// `400`: the password is too short.
        public static let weakPassword: Code = "weak_password"
        /// `400`: an account deletion without its exact confirmation.
        public static let confirmationRequired: Code = "confirmation_required"
        /// `400`: a wrong, used or expired one-time code.
        public static let invalidCode: Code = "invalid_code"

        // MARK: - 401 and 403

        /// `401`: no token, or one the server does not know.
        public static let unauthorized: Code = "unauthorized"
        /// `401`: the access token expired; refresh it.
        public static let tokenExpired: Code = "token_expired"
        /// `401`: a wrong email or password.
        public static let invalidCredentials: Code = "invalid_credentials"
        /// `401`: a refresh token presented after its rotation's grace window; the
        /// session is revoked.
        public static let refreshTokenReused: Code = "refresh_token_reused"
        /// `401`: the session was revoked (signed out, or a password change elsewhere).
        public static let sessionRevoked: Code = "session_revoked"
        /// `403`: not this caller's to do.
        public static let forbidden: Code = "forbidden"
        /// `403`: signing in with an email not confirmed yet.
        public static let emailNotConfirmed: Code = "email_not_confirmed"

        // MARK: - 404 to 409

        /// `404`: no such route or thing.
        public static let notFound: Code = "not_found"
        /// `405`: the route does not take this method.
        public static let methodNotAllowed: Code = "method_not_allowed"
        /// `408`: a body did not arrive whole in time.
        public static let requestTimeout: Code = "request_timeout"
        /// `409`: another account has this email (on any shard of a sharded server).
        public static let emailInUse: Code = "email_in_use"
        /// `409`: this user has an email already.
        public static let alreadyLinked: Code = "already_linked"
        /// `409`: signing in needs the app's choice (``FerryError/resolutionRequired(deviceRows:cloudRows:)``).
        public static let resolutionRequired: Code = "resolution_required"
        /// `409`: a sharded server cannot move this device's rows into an account of another
        /// shard; sign in with ``SignInChoice/keepCloud`` and write the rows again.
        public static let keepDeviceAcrossShards: Code = "keep_device_across_shards"
        /// `409`: a pull's cursor is older than tombstone retention; pull afresh.
        public static let cursorExpired: Code = "cursor_expired"
        /// `409`: another device holds the lock (``FerryError/lockHeld(holder:heartbeatAge:)``).
        public static let lockHeld: Code = "lock_held"
        /// `409`: another device took the lock (``FerryError/lockLost(holder:)``).
        public static let lockLost: Code = "lock_lost"
        /// `409`: a WatermelonDB push refused whole: a record changed on the server.
        public static let conflict: Code = "conflict"

        // MARK: - Sizes and rates

        /// `413`: the body is over the server's limit.
        public static let payloadTooLarge: Code = "payload_too_large"
        /// `414`: the URL is over the server's limit.
        public static let uriTooLong: Code = "uri_too_long"
        /// `431`: the headers are over the server's limit.
        public static let headersTooLarge: Code = "headers_too_large"
        /// `429`: over a limit; retried after `Retry-After` (``ServerError/retryAfter``).
        public static let rateLimited: Code = "rate_limited"

        // MARK: - 5xx: retryable

        /// `500`: the server failed.
        public static let `internal`: Code = "internal"
        /// `503`: the server cannot serve now (its database is down).
        public static let unavailable: Code = "unavailable"
        /// `503`, sharded servers: the email directory did not answer a link, a
        /// confirmation or an account deletion; nothing changed.
        public static let directoryUnavailable: Code = "directory_unavailable"
        /// `503`, sharded servers: the account's shard did not answer a sign-in forwarded
        /// to it.
        public static let shardUnavailable: Code = "shard_unavailable"
    }

    /// ``code``, typed.
    public var errorCode: Code { Code(rawValue: code) }
}

extension FerryError {
    /// The server's error code, typed, when the server answered with one (``serverCode``).
    public var errorCode: ServerError.Code? { serverCode.map(ServerError.Code.init(rawValue:)) }
}
