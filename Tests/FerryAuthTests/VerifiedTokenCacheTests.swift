import Foundation
import Testing

@testable import FerryGateway

/// The verified-token cache and the Bearer parser in front of it: a hit is only the
/// exact token that verified, and what can change (times, revocation) is checked on
/// every request anyway.
@Suite struct VerifiedTokenCacheTests {
    static let secret = String(repeating: "cache-secret-", count: 3)
    let signer = AccessTokenSigner(secret: secret)

    func claims(expiresIn seconds: Int = 3600) -> AccessTokenClaims {
        let now = Int(Date().timeIntervalSince1970)
        return AccessTokenClaims(
            userID: UUID(), sessionID: UUID(), deviceID: "phone", isAnonymous: true, issuedAt: now - 10,
            expiresAt: now + seconds)
    }

    func accounts() throws -> Accounts {
        let values = try SettingValues(
            GatewayConfiguration.settings,
            arguments: ["--database-url", "postgresql://unused", "--jwt-secret", Self.secret], environment: [:])
        return Accounts(
            configuration: try GatewayConfiguration(values), logger: Logger(format: .text, fileDescriptor: 2))
    }

    @Test func aTokenIsFoundByAllOfItsBytesOnly() {
        let cache = VerifiedTokenCache(capacity: 8)
        let claims = claims()
        let token = signer.sign(claims)
        cache.insert(Substring(token), VerifiedToken(claims: claims))

        #expect(cache.lookup(Substring(token))?.claims == claims)
        #expect(cache.lookup(Substring(token))?.identity.userID == claims.userID.uuidString.lowercased())
        // Same signature (same slot), other payload: a miss, not the cached claims.
        var bytes = Array(token.utf8)
        bytes[40] = bytes[40] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        #expect(cache.lookup(Substring(String(decoding: bytes, as: UTF8.self))) == nil)
        #expect(cache.lookup(Substring(token.dropLast())) == nil)
        #expect(cache.lookup(Substring(token + "x")) == nil)
    }

    @Test func aNewTokenReplacesTheOneInItsSlot() {
        let cache = VerifiedTokenCache(capacity: 1)
        let first = claims()
        let second = claims()
        cache.insert(Substring(signer.sign(first)), VerifiedToken(claims: first))
        cache.insert(Substring(signer.sign(second)), VerifiedToken(claims: second))
        #expect(cache.lookup(Substring(signer.sign(first))) == nil)
        #expect(cache.lookup(Substring(signer.sign(second)))?.claims == second)
    }

    @Test func goodTokensAreRememberedAndForgedOnesAreNot() throws {
        let accounts = try accounts()
        let claims = claims()
        let token = accounts.tokens.sign(claims)
        #expect(accounts.verifiedTokens.lookup(Substring(token)) == nil)
        #expect(try accounts.verifiedClaims(token: Substring(token)).get() == claims)
        #expect(accounts.verifiedTokens.lookup(Substring(token))?.claims == claims)

        let forged = AccessTokenSigner(secret: "someone else's secret").sign(claims)
        #expect(throws: APIError.self) { try accounts.verifiedClaims(token: Substring(forged)).get() }
        #expect(accounts.verifiedTokens.lookup(Substring(forged)) == nil)
    }

    @Test func aCachedTokenIsStillRefusedOnceExpiredOrRevoked() throws {
        let accounts = try accounts()
        // Planted as if verified an hour ago: the hit must still check the times.
        let expired = claims(expiresIn: -3600)
        let stale = "planted.expired.token"
        accounts.verifiedTokens.insert(Substring(stale), VerifiedToken(claims: expired))
        #expect(accounts.verifiedClaims(token: Substring(stale)).errorCode == "token_expired")

        let live = claims()
        let token = accounts.tokens.sign(live)
        #expect(accounts.verifiedClaims(token: Substring(token)).errorCode == nil)
        accounts.revoked.revoke(live.sessionID, until: live.expiresAt + 60)
        #expect(accounts.verifiedTokens.lookup(Substring(token)) != nil)
        #expect(accounts.verifiedClaims(token: Substring(token)).errorCode == "session_revoked")
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

extension Result where Failure == APIError {
    /// The PROTOCOL.md code of a failure, nil on success.
    fileprivate var errorCode: String? {
        if case .failure(let error) = self { return error.code }
        return nil
    }
}

@Suite struct UUIDTextTests {
    @Test func lowercasedStringMatchesFoundationsTextLowercased() {
        for _ in 0..<1000 {
            let id = UUID()
            #expect(id.lowercasedString == id.uuidString.lowercased())
        }
        let known = UUID(uuidString: "3F2504E0-4F89-11D3-9A0C-0305E82C3301")!
        #expect(known.lowercasedString == "3f2504e0-4f89-11d3-9a0c-0305e82c3301")
    }
}
