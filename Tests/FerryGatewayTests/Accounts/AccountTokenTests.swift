import FerryAuth
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// Access tokens over real HTTP (`GET /v1/auth/user`), refresh-token rotation, and
/// revocations reaching every gateway.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct AccountTokenTests {
    static let otherSecret = "another-secret-another-secret-another!"

    /// A compact JWT from raw header and payload JSON, signed HS256 with `secret`.
    static func forge(header: String = #"{"alg":"HS256","typ":"JWT"}"#, payload: String, secret: String) -> String {
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
        return input + "." + Base64URL.encode(hmacSHA256(key: secret, input))
    }

    /// The claims of a real session's token, to re-sign or alter.
    static func claims(of session: TestSession) throws -> AccessTokenClaims {
        let claims = session.claims
        return AccessTokenClaims(
            userID: try #require(UUID(uuidString: claims["sub"] as? String ?? "")),
            sessionID: try #require(UUID(uuidString: claims["sid"] as? String ?? "")),
            deviceID: try #require(claims["did"] as? String), isAnonymous: try #require(claims["anon"] as? Bool),
            issuedAt: try #require(claims["iat"] as? Int), expiresAt: try #require(claims["exp"] as? Int))
    }

    /// A token's payload JSON with `change` applied, re-encoded, keeping the original signature.
    static func tamper(_ token: String, _ change: (inout [String: Any]) -> Void) throws -> String {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        var payload = decodeClaims(token)
        change(&payload)
        let json = try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])
        return parts[0] + "." + Base64URL.encode(Array(json)) + "." + parts[2]
    }

    // MARK: - Every bad token shape

    @Test func everyMissingMalformedOrForgedTokenIsRefusedWith401Unauthorized() async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            let other = try await harness.signUpAnonymous()
            let real = try Self.claims(of: session)
            let payload = String(
                decoding: Base64URL.decode(session.accessToken.split(separator: ".")[1])!, as: UTF8.self)
            let cases: [(name: String, authorization: String?)] = [
                ("no Authorization header", nil),
                ("wrong scheme", "Basic \(session.accessToken)"),
                ("token scheme", "Token \(session.accessToken)"),
                ("bearer with nothing", "Bearer"),
                ("garbage", "Bearer garbage"),
                ("three garbage segments", "Bearer a.b.c"),
                (
                    "two segments",
                    "Bearer " + session.accessToken.split(separator: ".").prefix(2).joined(separator: ".")
                ),
                (
                    "alg none with an empty signature",
                    "Bearer " + Base64URL.encode(Array(#"{"alg":"none","typ":"JWT"}"#.utf8)) + "."
                        + session.accessToken.split(separator: ".")[1] + "."
                ),
                (
                    "HS512 header",
                    "Bearer "
                        + Self.forge(header: #"{"alg":"HS512","typ":"JWT"}"#, payload: payload, secret: testSecret)
                ),
                ("anon flipped", "Bearer " + (try Self.tamper(session.accessToken) { $0["anon"] = false })),
                ("sub swapped", "Bearer " + (try Self.tamper(session.accessToken) { $0["sub"] = other.userID })),
                (
                    "exp pushed out",
                    "Bearer " + (try Self.tamper(session.accessToken) { $0["exp"] = real.expiresAt + 86_400 })
                ),
                ("signed with another secret", "Bearer " + AccessTokenSigner(secret: Self.otherSecret).sign(real)),
                (
                    "expired and signed with another secret",
                    "Bearer "
                        + AccessTokenSigner(secret: Self.otherSecret).sign(
                            AccessTokenSigner(secret: Self.otherSecret).claims(
                                userID: real.userID, sessionID: real.sessionID, deviceID: real.deviceID,
                                isAnonymous: true, now: Int(Date().timeIntervalSince1970) - 86_400))
                ),
            ]
            for (name, authorization) in cases {
                let response = try await harness.call(
                    "GET", "/v1/auth/user", headers: authorization.map { [("Authorization", $0)] } ?? [])
                #expect(response.status == 401, "\(name): \(response)")
                #expect(response.code == "unauthorized", "\(name): \(response)")
                #expect(response.retryable == false, "\(name): \(response)")
            }
            // The genuine token still works: the refusals were about the shapes.
            #expect(try await harness.me(session.accessToken).status == 200)
        }
    }

    @Test func expiredTokenIsRefusedWithTokenExpiredAfterTheLeeway() async throws {
        try await withAccountsGateway(arguments: ["--token-leeway", "30"]) { harness in
            let session = try await harness.signUpAnonymous()
            let real = try Self.claims(of: session)
            let now = Int(Date().timeIntervalSince1970)
            var expired = real
            expired.issuedAt = now - 3_700
            expired.expiresAt = now - 100
            let response = try await harness.me(AccessTokenSigner(secret: testSecret).sign(expired))
            #expect(response.status == 401)
            #expect(response.code == "token_expired")
            #expect(response.retryable == false)
            // Within the leeway a token past `exp` is still accepted (clock skew).
            var justExpired = real
            justExpired.expiresAt = now - 5
            #expect(try await harness.me(AccessTokenSigner(secret: testSecret).sign(justExpired)).status == 200)
        }
    }

    @Test func tokenSignedWithThePreviousSecretIsAcceptedOnlyWhilePreviousSecretIsSet() async throws {
        let newSecret = "rotated-secret-rotated-secret-rotated!"
        try await withAccountsGateway(arguments: ["--jwt-secret", newSecret, "--jwt-previous-secret", testSecret]) {
            rotating in
            let session = try await rotating.signUpAnonymous()
            let claims = try Self.claims(of: session)
            let oldToken = AccessTokenSigner(secret: testSecret).sign(claims)
            #expect(oldToken != session.accessToken, "the gateway signs with the new secret")
            let accepted = try await rotating.me(oldToken)
            #expect(accepted.status == 200, "\(accepted)")
            #expect(accepted.string("user", "id") == session.userID)

            try await withGateway(databaseURL: rotating.database.gatewayURL, arguments: ["--jwt-secret", newSecret]) {
                port in
                let refused = try await call("GET", "/v1/auth/user", port: port, token: oldToken)
                #expect(refused.status == 401)
                #expect(refused.code == "unauthorized")
                let current = try await call("GET", "/v1/auth/user", port: port, token: session.accessToken)
                #expect(current.status == 200, "the new secret's token works on both")
            }
        }
    }

    // MARK: - Refresh

    @Test func refreshRotatesAndEachRefreshTokenIsGoodOnce() async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            let first = try await harness.refresh(session.refreshToken)
            #expect(first.status == 200, "\(first)")
            let rotated = try harness.session(from: first, device: session.deviceID)
            #expect(rotated.userID == session.userID)
            #expect(rotated.refreshToken != session.refreshToken)
            #expect(rotated.sessionID == session.sessionID, "refreshing keeps the session")
            #expect(rotated.claims["did"] as? String == session.deviceID)
            #expect(try await harness.me(rotated.accessToken).status == 200)

            let second = try await harness.refresh(rotated.refreshToken)
            #expect(second.status == 200, "the rotated token is good once: \(second)")

            let unknown = try await harness.refresh("not-a-refresh-token")
            #expect(unknown.status == 401)
            #expect(unknown.code == "unauthorized")
        }
    }

    @Test func reusedRefreshTokenRevokesTheWholeSession() async throws {
        // No grace window: the rotated token presented again at once is a reuse (with one,
        // RefreshGraceTests).
        try await withAccountsGateway(arguments: ["--refresh-grace", "0"]) { harness in
            let session = try await harness.signUpAnonymous()
            let bystander = try await harness.signUpAnonymous()
            let rotated = try harness.session(
                from: try await harness.refresh(session.refreshToken), device: session.deviceID)

            let reused = try await harness.refresh(session.refreshToken)
            #expect(reused.status == 401)
            #expect(reused.code == "refresh_token_reused")
            #expect(reused.retryable == false)

            // The thief's (or the owner's) newer refresh token dies with the session…
            let afterReuse = try await harness.refresh(rotated.refreshToken)
            #expect(afterReuse.status == 401)
            #expect(afterReuse.code == "session_revoked")
            // …and so do both access tokens.
            for token in [session.accessToken, rotated.accessToken] {
                let me = try await harness.me(token)
                #expect(me.status == 401)
                #expect(me.code == "session_revoked")
            }
            #expect(
                try await harness.database.value(
                    "select reason from ferry.revocations where session_id = $1", [session.sessionID])
                    == "token_reused")
            // Another session is untouched.
            #expect(try await harness.me(bystander.accessToken).status == 200)
            #expect(try await harness.refresh(bystander.refreshToken).status == 200)
        }
    }

    @Test func refreshTokenOfASignedOutSessionIsSessionRevoked() async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            let rotated = try harness.session(from: try await harness.refresh(session.refreshToken), device: "")
            #expect(try await harness.call("POST", "/v1/auth/signout", token: rotated.accessToken).status == 204)
            // The live token and the one it replaced alike: the session is what was revoked.
            for token in [rotated.refreshToken, session.refreshToken] {
                let refreshed = try await harness.refresh(token)
                #expect(refreshed.status == 401 && refreshed.code == "session_revoked", "\(refreshed)")
            }
        }
    }

    // MARK: - Sign-out across gateways

    @Test func signOutOnOneGatewayIsRefusedByAnotherWithinTwoSeconds() async throws {
        try await withAccountsGateway { first in
            try await withStartedGateway(databaseURL: first.database.gatewayURL) { secondGateway, secondPort in
                // The second gateway must be listening before the revocation is announced.
                let ready = try await eventuallyHolds(seconds: 5) {
                    try await call("GET", "/readyz", port: secondPort).status == 200
                }
                try #require(ready, "the second gateway's listener never connected")
                let session = try await first.signUpAnonymous()
                let sessionID = try #require(UUID(uuidString: session.sessionID))
                #expect(
                    try await call("GET", "/v1/auth/user", port: secondPort, token: session.accessToken).status == 200)
                #expect(!secondGateway.accounts.revoked.isRevoked(sessionID))

                #expect(try await first.call("POST", "/v1/auth/signout", token: session.accessToken).status == 204)

                // The NOTIFY reaches the second gateway's cache, which alone decides for
                // requests that do not ask the database (push, pull, streams).
                let heard = try await eventuallyHolds(seconds: 2) {
                    secondGateway.accounts.revoked.isRevoked(sessionID)
                }
                #expect(heard, "the second gateway did not hear the revocation within 2 s")
                let refused = try await call("GET", "/v1/auth/user", port: secondPort, token: session.accessToken)
                #expect(refused.status == 401)
                #expect(refused.code == "session_revoked")
            }
        }
    }
}
