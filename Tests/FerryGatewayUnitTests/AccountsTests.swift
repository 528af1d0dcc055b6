import FerryAuth
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// ``Accounts``' token check and the Bearer parser in front of it: the verified-token
/// cache remembers only tokens that verified, and what can change (times, revocation)
/// is checked on every request anyway.
@Suite(.tagSelection) struct AccountsTests {
    func claims(expiresIn seconds: Int = 3600) -> AccessTokenClaims {
        let now = Int(Date().timeIntervalSince1970)
        return AccessTokenClaims(
            userID: UUID(), sessionID: UUID(), deviceID: "phone", isAnonymous: true, issuedAt: now - 10,
            expiresAt: now + seconds)
    }

    func accounts() throws -> Accounts {
        Accounts(
            configuration: try TestGateway.configuration(databaseURL: "postgresql://unused"),
            logger: Logger(format: .text, fileDescriptor: 2))
    }

    @Test func goodTokensAreRememberedAndForgedOnesAreNot() throws {
        let accounts = try accounts()
        let claims = claims()
        let token = accounts.tokens.sign(claims)
        #expect(accounts.verifiedTokens.lookup(Substring(token)) == nil)
        #expect(try accounts.verifiedToken(token: Substring(token)).get().claims == claims)
        #expect(accounts.verifiedTokens.lookup(Substring(token))?.claims == claims)

        let forged = AccessTokenSigner(secret: "someone else's secret").sign(claims)
        #expect(throws: Accounts.TokenRefusal.self) { try accounts.verifiedToken(token: Substring(forged)).get() }
        #expect(accounts.verifiedTokens.lookup(Substring(forged)) == nil)
    }

    @Test func aStreamsTokenIsCheckedButNotRemembered() throws {
        let accounts = try accounts()
        let claims = claims()
        let token = accounts.tokens.sign(claims)
        #expect(try accounts.streamClaims(token: Substring(token)).get() == claims)
        #expect(accounts.verifiedTokens.lookup(Substring(token)) == nil)
        let forged = AccessTokenSigner(secret: "someone else's secret").sign(claims)
        #expect(throws: Accounts.TokenRefusal.self) { try accounts.streamClaims(token: Substring(forged)).get() }

        // One a request verified is found, and its times and revocation still count.
        _ = accounts.verifiedToken(token: Substring(token))
        #expect(try accounts.streamClaims(token: Substring(token)).get() == claims)
        accounts.revoked.revoke(claims.sessionID, until: claims.expiresAt + 60)
        #expect(accounts.streamClaims(token: Substring(token)).errorCode == "session_revoked")
    }

    @Test func aCachedTokenIsStillRefusedOnceExpiredOrRevoked() throws {
        let accounts = try accounts()
        // Planted as if verified an hour ago: the hit must still check the times.
        let expired = claims(expiresIn: -3600)
        let stale = "planted.expired.token"
        accounts.verifiedTokens.insert(Substring(stale), VerifiedToken(claims: expired))
        #expect(accounts.verifiedToken(token: Substring(stale)).errorCode == "token_expired")

        let live = claims()
        let token = accounts.tokens.sign(live)
        #expect(accounts.verifiedToken(token: Substring(token)).errorCode == nil)
        accounts.revoked.revoke(live.sessionID, until: live.expiresAt + 60)
        #expect(accounts.verifiedTokens.lookup(Substring(token)) != nil)
        #expect(accounts.verifiedToken(token: Substring(token)).errorCode == "session_revoked")
    }

    @Test func bearerTokenParsing() {
        #expect(Accounts.bearerToken(in: "Bearer abc") == "abc")
        #expect(Accounts.bearerToken(in: "bearer abc") == "abc")
        #expect(Accounts.bearerToken(in: "BEARER  abc.def") == "abc.def")
        #expect(Accounts.bearerToken(in: "Bearer") == nil)
        #expect(Accounts.bearerToken(in: "Bearer ") == nil)
        #expect(Accounts.bearerToken(in: "Bearerabc") == nil)
        #expect(Accounts.bearerToken(in: "Basic abc") == nil)
        #expect(Accounts.bearerToken(in: "Bearxr abc") == nil)
        #expect(Accounts.bearerToken(in: "") == nil)
    }
}

extension Result where Failure == Accounts.TokenRefusal {
    /// The PROTOCOL.md code a refusal is answered with, nil on success.
    fileprivate var errorCode: String? {
        if case .failure(let refusal) = self { return refusal.answer.code }
        return nil
    }
}
