import FerryTestSupport
import Foundation
import Testing

@testable import FerryAuth

/// The verified-token cache: a hit is only the exact token that verified, and a new
/// token replaces the one in its slot.
@Suite(.tagSelection) struct VerifiedTokenCacheTests {
    static let secret = String(repeating: "cache-secret-", count: 3)
    let signer = AccessTokenSigner(secret: secret)

    func claims(expiresIn seconds: Int = 3600) -> AccessTokenClaims {
        let now = Int(Date().timeIntervalSince1970)
        return AccessTokenClaims(
            userID: UUID(), sessionID: UUID(), deviceID: "phone", isAnonymous: true, issuedAt: now - 10,
            expiresAt: now + seconds)
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
}

@Suite(.tagSelection) struct UUIDTextTests {
    @Test func lowercasedStringMatchesFoundationsTextLowercased() {
        for _ in 0..<1000 {
            let id = UUID()
            #expect(id.lowercasedString == id.uuidString.lowercased())
        }
        let known = UUID(uuidString: "3F2504E0-4F89-11D3-9A0C-0305E82C3301")!
        #expect(known.lowercasedString == "3f2504e0-4f89-11d3-9a0c-0305e82c3301")
    }
}
