import FerryAuth
import FerryJSON
import Foundation

/// A stream's own messages (PROTOCOL.md "Streams"): the in-band
/// `{"type":"auth","access_token"}` extends a WebSocket stream with a fresh token of the
/// same user and device; other message types are ignored. Says what to do; ``CueHub``
/// does it.
enum InBandAuth {
    /// What a client's message asks of its stream.
    enum Outcome: Equatable {
        /// Not an `auth` message: nothing.
        case ignored
        /// A fresh, valid token of the stream's user and device: its claims.
        case renewed(AccessTokenClaims)
        /// The stream closes, for this reason.
        case close(StreamCloseReason)
    }

    /// What `message`, sent on a stream of `userID`'s `deviceID`, asks for; `accounts`
    /// checks the token.
    static func read(_ message: UnsafeRawBufferPointer, userID: UUID, deviceID: String, accounts: Accounts) -> Outcome {
        var type: String?
        var token: String?
        let isObject = JSONObjectReader.forEachMember(in: message.assumingMemoryBound(to: UInt8.self)) {
            key, value in
            if key.equals("type"), case .string(let text) = value { type = text.decoded() }
            if key.equals("access_token"), case .string(let text) = value { token = text.decoded() }
            return true
        }
        guard isObject, type == "auth" else { return .ignored }
        guard let token else { return .close(.policyViolation("access_token missing")) }
        switch accounts.streamClaims(token: Substring(token)) {
        case .success(let claims) where claims.userID == userID && claims.deviceID == deviceID:
            return .renewed(claims)
        case .success:
            return .close(.policyViolation("the token is another user's or device's"))
        case .failure(.expired):
            return .close(.tokenExpired)
        case .failure(.revoked):
            return .close(.sessionRevoked)
        case .failure(.invalid):
            return .close(.policyViolation("the access token is not valid"))
        }
    }
}
