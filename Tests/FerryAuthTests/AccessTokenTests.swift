import FerryAuth
import FerryTestSupport
import Foundation
import Testing

/// HS256 access tokens: what verifies, and every way one must not.
@Suite(.tagSelection) struct AccessTokenTests {
    static let secret = String(repeating: "current-secret-", count: 3)
    static let previous = String(repeating: "previous-secret", count: 3)
    static let now = 1_750_000_000
    let signer = AccessTokenSigner(secret: secret)

    var claims: AccessTokenClaims {
        AccessTokenClaims(
            userID: UUID(uuidString: "3f2504e0-4f89-11d3-9a0c-0305e82c3301")!,
            sessionID: UUID(uuidString: "6ba7b810-9dad-11d1-80b4-00c04fd430c8")!,
            deviceID: "iPad \"kitchen\" \\ ü\n", isAnonymous: true, issuedAt: Self.now, expiresAt: Self.now + 3600)
    }

    /// A token with the given header and payload JSON, signed with `secret`.
    func forge(header: String = #"{"alg":"HS256","typ":"JWT"}"#, payload: String, secret: String = secret) -> String {
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
        return input + "." + Base64URL.encode(hmacSHA256(key: secret, input))
    }

    var validPayload: String {
        #"{"sub":"3f2504e0-4f89-11d3-9a0c-0305e82c3301","sid":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","#
            + #""did":"phone","anon":false,"iat":\#(Self.now),"exp":\#(Self.now + 3600)}"#
    }

    // MARK: - Accepted

    @Test func signedTokenVerifiesToTheSameClaims() {
        let token = signer.sign(claims)
        #expect(token.split(separator: ".").count == 3)
        #expect(signer.verify(token, now: Self.now + 10) == .success(claims))
    }

    @Test func claimsForANewTokenExpireAfterTheLifetime() {
        let signer = AccessTokenSigner(secret: Self.secret, lifetimeSeconds: 600)
        let claims = signer.claims(userID: UUID(), sessionID: UUID(), deviceID: "d", isAnonymous: false, now: Self.now)
        #expect(claims.issuedAt == Self.now)
        #expect(claims.expiresAt == Self.now + 600)
        #expect(AccessTokenSigner(secret: Self.secret).lifetimeSeconds == 3600)
    }

    @Test func handBuiltTokenFromAnotherLibraryShapeVerifies() {
        // Other key order, whitespace, no typ, an unknown claim: still one of ours.
        let payload =
            #" { "exp": \#(Self.now + 60), "iat": \#(Self.now), "anon": false, "did": "d\u00e9", "role": [1, {"a": null}],"#
            + #" "sid": "6BA7B810-9DAD-11D1-80B4-00C04FD430C8", "sub": "3f2504e0-4f89-11d3-9a0c-0305e82c3301" } "#
        let token = forge(header: #"{"alg":"HS256"}"#, payload: payload)
        let verified = try? signer.verify(token, now: Self.now).get()
        #expect(verified?.deviceID == "dé")
        #expect(verified?.sessionID == UUID(uuidString: "6ba7b810-9dad-11d1-80b4-00c04fd430c8"))
    }

    @Test func substringTokenVerifies() {
        let header = "Bearer " + signer.sign(claims)
        #expect(signer.verify(header.dropFirst(7), now: Self.now) == .success(claims))
    }

    // MARK: - Time

    @Test func expiredTokenIsExpired() {
        let token = signer.sign(claims)
        let result = signer.verify(token, now: claims.expiresAt + 30)
        #expect(result == .failure(.expired))
        #expect(AccessTokenError.expired.code == "token_expired")
        #expect(AccessTokenError.badSignature.code == "unauthorized")
    }

    @Test func expiryWithinTheLeewayIsAccepted() {
        let token = signer.sign(claims)
        #expect(signer.verify(token, now: claims.expiresAt + 29) == .success(claims))
        let strict = AccessTokenSigner(secret: Self.secret, leewaySeconds: 0)
        #expect(strict.verify(token, now: claims.expiresAt) == .failure(.expired))
        #expect(strict.verify(token, now: claims.expiresAt - 1) == .success(claims))
    }

    @Test func anExpBeyondTheLifetimeIsCutBackToIt() {
        var claims = claims
        claims.expiresAt = .max
        let token = signer.sign(claims)
        #expect(signer.verify(token, now: Self.now + 3600 + 29) == .success(claims))
        #expect(signer.verify(token, now: Self.now + 3600 + 30) == .failure(.expired))
        #expect(signer.acceptedUntil(claims) == Self.now + 3600 + 30)
    }

    @Test func timesAtTheEndsOfTheIntegerRangeAreRefusedWithoutTrapping() {
        let extremes = [Int.min, Int.min + 1, -1, 0, Int.max - 1, Int.max]
        for issuedAt in extremes {
            for expiresAt in extremes {
                var claims = claims
                claims.issuedAt = issuedAt
                claims.expiresAt = expiresAt
                let result = signer.verify(signer.sign(claims), now: Self.now)
                #expect(
                    result == .failure(issuedAt > Self.now ? .issuedInFuture : .expired), "\(issuedAt) \(expiresAt)")
            }
        }
        #expect(signer.checkTimes(of: claims, now: .max) == .expired)
        #expect(signer.checkTimes(of: claims, now: .min) == .issuedInFuture)
    }

    @Test func claimTimesThatAreNotIntegersOf64BitsAreInvalidClaims() {
        func payload(exp: String) -> String {
            #"{"sub":"3f2504e0-4f89-11d3-9a0c-0305e82c3301","sid":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","#
                + #""did":"phone","anon":false,"iat":\#(Self.now),"exp":\#(exp)}"#
        }
        for exp in [
            "9223372036854775808", "-9223372036854775809", "18446744073709551616", "1e400", "1.75e9", "1750003600.0",
            "\"1750003600\"",
        ] {
            #expect(
                signer.verify(forge(payload: payload(exp: exp)), now: Self.now) == .failure(.invalidClaims), "\(exp)")
        }
        #expect(
            signer.verify(forge(payload: payload(exp: "-9223372036854775808")), now: Self.now) == .failure(.expired))
        let largest = signer.verify(forge(payload: payload(exp: "9223372036854775807")), now: Self.now + 60)
        #expect(largest.map(\.expiresAt) == .success(.max))
    }

    @Test func tokenIssuedInTheFutureBeyondTheLeewayIsRefused() {
        let token = signer.sign(claims)
        #expect(signer.verify(token, now: Self.now - 30) == .success(claims))
        #expect(signer.verify(token, now: Self.now - 31) == .failure(.issuedInFuture))
    }

    @Test func forgedTokenIsNeverReportedAsExpired() {
        let token = forge(payload: validPayload, secret: "someone else's secret, long enough!")
        #expect(signer.verify(token, now: Self.now + 100_000) == .failure(.badSignature))
    }

    // MARK: - Header

    @Test func algNoneWithEmptySignatureIsRefused() {
        let input =
            Base64URL.encode(Array(#"{"alg":"none","typ":"JWT"}"#.utf8)) + "."
            + Base64URL.encode(Array(validPayload.utf8))
        #expect(signer.verify(input + ".", now: Self.now) == .failure(.unsupportedHeader))
        #expect(signer.verify(input, now: Self.now) == .failure(.malformed))
    }

    @Test func hs512HeaderIsRefusedEvenWithAnHS256Signature() {
        let token = forge(header: #"{"alg":"HS512","typ":"JWT"}"#, payload: validPayload)
        #expect(signer.verify(token, now: Self.now) == .failure(.unsupportedHeader))
    }

    @Test func headerWithoutAlgOrWithItTwiceIsRefused() {
        for header in [
            #"{"typ":"JWT"}"#, #"{"alg":"HS256","alg":"HS256"}"#, #"{"alg":"HS256","\u0061lg":"none"}"#,
            #"{"alg":"HS256","typ":"JWT","kid":"1"}"#, #"{"alg":"hs256"}"#, #"{"alg":"HS256","typ":"JOSE"}"#,
            #"{"alg":["HS256"]}"#, "{}",
        ] {
            #expect(
                signer.verify(forge(header: header, payload: validPayload), now: Self.now)
                    == .failure(.unsupportedHeader))
        }
    }

    // MARK: - Signature

    @Test func tamperedPayloadIsRefused() {
        let token = signer.sign(claims)
        let parts = token.split(separator: ".").map(String.init)
        var payload = String(decoding: Base64URL.decode(parts[1])!, as: UTF8.self)
        payload = payload.replacingOccurrences(of: #""anon":true"#, with: #""anon":false"#)
        let flippedAnon = parts[0] + "." + Base64URL.encode(Array(payload.utf8)) + "." + parts[2]
        #expect(signer.verify(flippedAnon, now: Self.now) == .failure(.badSignature))
        payload = payload.replacingOccurrences(of: "3f2504e0", with: "3f2504e1")
        let otherUser = parts[0] + "." + Base64URL.encode(Array(payload.utf8)) + "." + parts[2]
        #expect(signer.verify(otherUser, now: Self.now) == .failure(.badSignature))
    }

    @Test func signatureFromAnotherSecretIsRefused() {
        let other = AccessTokenSigner(secret: Self.previous)
        #expect(signer.verify(other.sign(claims), now: Self.now) == .failure(.badSignature))
    }

    @Test func previousSecretIsAcceptedDuringRotationOnly() {
        let old = AccessTokenSigner(secret: Self.previous).sign(claims)
        let rotating = AccessTokenSigner(secret: Self.secret, previousSecret: Self.previous)
        #expect(rotating.verify(old, now: Self.now) == .success(claims))
        #expect(rotating.verify(rotating.sign(claims), now: Self.now) == .success(claims))
        let rotated = AccessTokenSigner(secret: Self.secret)
        #expect(rotated.verify(old, now: Self.now) == .failure(.badSignature))
    }

    @Test func truncatedOrExtendedSignatureIsMalformed() {
        let token = signer.sign(claims)
        #expect(signer.verify(String(token.dropLast()), now: Self.now) == .failure(.malformed))
        #expect(signer.verify(token + "A", now: Self.now) == .failure(.malformed))
    }

    // MARK: - Shape

    @Test func wrongSegmentCountsAreMalformed() {
        let parts = signer.sign(claims).split(separator: ".").map(String.init)
        for token in [
            parts[0], parts[0] + "." + parts[1], parts.joined(separator: ".") + "." + parts[2], "", "..", "...",
        ] {
            #expect(signer.verify(token, now: Self.now) == .failure(.malformed))
        }
    }

    @Test func badBase64IsMalformed() {
        let parts = signer.sign(claims).split(separator: ".").map(String.init)
        let padded = parts[0] + "." + parts[1] + "=." + parts[2]
        let standard = parts[0] + "." + parts[1] + "." + parts[2].replacingOccurrences(of: "-", with: "+")
        #expect(signer.verify(padded, now: Self.now) != .success(claims))
        #expect(signer.verify(padded, now: Self.now) == .failure(.badSignature))
        let badPayload = forgeRawPayload("eyJ!")
        #expect(signer.verify(badPayload, now: Self.now) == .failure(.malformed))
        if standard != parts.joined(separator: ".") {
            #expect(signer.verify(standard, now: Self.now) == .failure(.malformed))
        }
        #expect(signer.verify("e30!." + parts[1] + "." + parts[2], now: Self.now) == .failure(.malformed))
        let badSignature = parts[0] + "." + parts[1] + "." + String(repeating: "%", count: 43)
        #expect(signer.verify(badSignature, now: Self.now) == .failure(.malformed))
    }

    /// A correctly signed token whose payload segment is `segment` as given.
    func forgeRawPayload(_ segment: String) -> String {
        let input = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "." + segment
        return input + "." + Base64URL.encode(hmacSHA256(key: Self.secret, input))
    }

    @Test func signedPayloadThatIsNotJSONIsMalformed() {
        for payload in [
            "not json", "[1,2]", validPayload + "x", validPayload + "}", String(validPayload.dropLast()),
            #"{"sub":"a\x"}"#, "{\"did\":\"\u{1}\"}", #"{"did":"\ud800"}"#, "", #"{"a":01}"#, #"{"a":1.}"#,
        ] {
            #expect(signer.verify(forge(payload: payload), now: Self.now) == .failure(.malformed), "\(payload)")
        }
    }

    @Test func missingClaimIsRefused() {
        for claim in ["sub", "sid", "did", "anon", "iat", "exp"] {
            let payload = validPayload.replacingOccurrences(of: "\"\(claim)\"", with: "\"x\(claim)\"")
            #expect(signer.verify(forge(payload: payload), now: Self.now) == .failure(.invalidClaims), "\(claim)")
        }
    }

    @Test func claimOfTheWrongTypeIsRefused() {
        let replacements = [
            (#""anon":false"#, #""anon":"false""#), (#""anon":false"#, #""anon":0"#),
            (#""exp":\#(Self.now + 3600)"#, #""exp":"\#(Self.now + 3600)""#),
            (#""exp":\#(Self.now + 3600)"#, #""exp":\#(Self.now + 3600).0"#),
            (#""iat":\#(Self.now)"#, #""iat":1e9"#), (#""iat":\#(Self.now)"#, #""iat":null"#),
            (#""did":"phone""#, #""did":7"#), (#""sub":"3f2504e0-4f89-11d3-9a0c-0305e82c3301""#, #""sub":"alice""#),
            (#""sid":"6ba7b810-9dad-11d1-80b4-00c04fd430c8""#, #""sid":{}"#),
            (#""exp":\#(Self.now + 3600)"#, #""exp":99999999999999999999"#),
        ]
        for (original, replacement) in replacements {
            let payload = validPayload.replacingOccurrences(of: original, with: replacement)
            #expect(payload != validPayload)
            #expect(signer.verify(forge(payload: payload), now: Self.now) == .failure(.invalidClaims), "\(replacement)")
        }
    }

    @Test func duplicatedClaimIsRefused() {
        let payload = String(validPayload.dropLast()) + #","anon":true}"#
        #expect(signer.verify(forge(payload: payload), now: Self.now) == .failure(.invalidClaims))
    }

    @Test func oversizedTokenIsRefusedBeforeAnyWork() {
        let token = forge(
            payload: String(validPayload.dropLast()) + #","pad":"\#(String(repeating: "x", count: 4000))"}"#)
        #expect(signer.verify(token, now: Self.now) == .failure(.malformed))
    }
}
