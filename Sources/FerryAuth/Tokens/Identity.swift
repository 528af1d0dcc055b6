/// Who is asking: the claims of a verified access token, as the text the request's SQL
/// is given (the gateway's identity statement sets them per transaction).
public struct Identity: Sendable, Equatable {
    /// The user (`sub`), a UUID string.
    public var userID: String
    /// The session (`sid`), a UUID string.
    public var sessionID: String
    /// The device (`did`): the device for push, pull, streams and locks.
    public var deviceID: String
    /// Whether the user had no email when the token was issued (`anon`).
    public var isAnonymous: Bool

    /// An identity from its parts.
    public init(userID: String, sessionID: String, deviceID: String, isAnonymous: Bool) {
        self.userID = userID
        self.sessionID = sessionID
        self.deviceID = deviceID
        self.isAnonymous = isAnonymous
    }
}
