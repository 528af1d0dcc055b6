/// `{"id", "is_anonymous", "email", "email_confirmed"}`: a user as the server describes it.
struct UserBody: Sendable, Decodable {
    var id: String
    var isAnonymous: Bool?
    var email: String?
    var emailConfirmed: Bool?

    private enum CodingKeys: String, CodingKey {
        case id, email
        case isAnonymous = "is_anonymous"
        case emailConfirmed = "email_confirmed"
    }
}

/// `{"access_token", "refresh_token", "token_type", "expires_in"}`.
struct SessionBody: Sendable, Decodable {
    var accessToken: String
    var refreshToken: String
    var expiresIn: Int64?

    private enum CodingKeys: String, CodingKey {
        case accessToken = "access_token"
        case refreshToken = "refresh_token"
        case expiresIn = "expires_in"
    }
}

/// The answer of sign-up, refresh, sign-in and password changes: `{"user", "session", "reset"?}`.
struct SessionAnswer: Sendable, Decodable {
    var user: UserBody
    var session: SessionBody
    /// Sign-in with `keep_cloud`: the device must drop its local data.
    var reset: Bool?
}

/// `{"user"}`: the answer of link and confirm.
struct UserAnswer: Sendable, Decodable {
    var user: UserBody
}

/// The claims of an access token the client reads (the server checks the signature).
struct TokenClaims: Sendable, Decodable {
    /// The session, the device, the expiry and the issue time (seconds since 1970).
    var sid: String?
    var did: String?
    var exp: Int64?
    var iat: Int64?
}
