import FerryHTTP
import FerryJSON

// The JSON bodies of PROTOCOL.md's Accounts answers.

/// `{"id", "is_anonymous", "email", "email_confirmed"}`; decoded from another shard's
/// answer too (``CrossShardSignIn``).
struct UserBody: Codable {
    var id: String
    var email: String?
    /// False for an anonymous user (it has no email to confirm).
    var emailConfirmed: Bool
    var isAnonymous: Bool { email == nil }

    init(id: String, email: String?, emailConfirmed: Bool) {
        self.id = id
        self.email = email
        self.emailConfirmed = email != nil && emailConfirmed
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            id: try container.decode(String.self, forKey: .id),
            email: try container.decodeIfPresent(String.self, forKey: .email),
            emailConfirmed: try container.decode(Bool.self, forKey: .emailConfirmed))
    }

    enum CodingKeys: String, CodingKey {
        case id
        case isAnonymous = "is_anonymous"
        case email
        case emailConfirmed = "email_confirmed"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(isAnonymous, forKey: .isAnonymous)
        // Present as null for anonymous users, never left out.
        try container.encode(email, forKey: .email)
        try container.encode(emailConfirmed, forKey: .emailConfirmed)
    }
}

/// `{"access_token", "refresh_token", "token_type": "bearer", "expires_in"}`.
struct SessionBody: Codable {
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

struct UserAndSession: Encodable {
    var user: UserBody
    var session: SessionBody
}

struct SignInAnswer: Codable {
    var user: UserBody
    var session: SessionBody
    var reset: Bool
}

/// `{"cloud_rows"}`: a check-only sign-in's answer between shards (``SignInAttempt``,
/// ``ShardForwarder/signInCheckHeader``): the credentials are right, and the account owns
/// this many live rows.
struct SignInCheckAnswer: Codable {
    var cloudRows: Int

    enum CodingKeys: String, CodingKey {
        case cloudRows = "cloud_rows"
    }
}

/// `{"user": {…}}`, written by hand: `GET /v1/auth/user` is the cheapest authenticated
/// request, and `JSONEncoder` cost about 14 % of the gateway's CPU time on it (perf,
/// bench/auth.sh). The same fields as ``UserBody``'s `Encodable` form, in its order
/// (`JSONEncoder` on Linux does not keep any).
struct UserOnly {
    var user: UserBody

    var response: HTTPResponse {
        var body: [UInt8] = []
        body.reserveCapacity(120 + (user.email?.utf8.count ?? 0))
        body.append(contentsOf: #"{"user":{"id":"#.utf8)
        JSONString.append(user.id, to: &body)
        body.append(contentsOf: (user.isAnonymous ? #","is_anonymous":true"# : #","is_anonymous":false"#).utf8)
        body.append(contentsOf: #","email":"#.utf8)
        if let email = user.email {
            JSONString.append(email, to: &body)
        } else {
            body.append(contentsOf: "null".utf8)
        }
        body.append(contentsOf: (user.emailConfirmed ? #","email_confirmed":true"# : #","email_confirmed":false"#).utf8)
        body.append(contentsOf: "}}".utf8)
        return .json(bytes: body)
    }
}
