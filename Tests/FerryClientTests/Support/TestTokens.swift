import FerryAuth
import Foundation
import Testing

/// An access token for a session, signed with a test gateway's `secret`, issued 10 s
/// before `now` and ending at `expiresAt` (Unix seconds): a short-lived token the gateway
/// accepts as its own.
func signedAccessToken(
    secret: String, userID: String, sessionID: String, deviceID: String, isAnonymous: Bool, now: Int,
    expiresAt: Int
) throws -> String {
    let signer = AccessTokenSigner(secret: secret)
    var claims = signer.claims(
        userID: try #require(UUID(uuidString: userID)), sessionID: try #require(UUID(uuidString: sessionID)),
        deviceID: deviceID, isAnonymous: isAnonymous, now: now - 10)
    claims.expiresAt = expiresAt
    return signer.sign(claims)
}
