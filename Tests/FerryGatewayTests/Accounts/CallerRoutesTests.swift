import FerryAuth
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// The routes behind the caller gates (`Accounts.callers`, `callersOfRevokedSessionsToo`,
/// `streamCallers`): every one refuses a request with no token, an expired token or a
/// revoked session with PROTOCOL.md's `401` codes, before its own checks (each request
/// carries a body that is not JSON, which a handler would refuse `400 invalid_json`).
@Suite(.hangLimit, .tags(.database), .tagSelection) struct CallerRoutesTests {
    /// Every route a caller must be known for, with the gate's own cases for each.
    static let routes: [(method: String, path: String)] = [
        ("POST", "/v1/push"), ("GET", "/v1/pull"), ("GET", "/v1/schema"),
        ("GET", "/v1/watermelon/sync"), ("POST", "/v1/watermelon/sync?last_pulled_at=1"),
        ("POST", "/v1/locks/games/slot/claim"), ("POST", "/v1/locks/games/slot/heartbeat"),
        ("POST", "/v1/locks/games/slot/release"),
        ("GET", "/v1/auth/user"), ("POST", "/v1/auth/link"), ("POST", "/v1/auth/signout"),
        ("DELETE", "/v1/account"), ("GET", "/v1/stream"), ("GET", "/v1/events"),
    ]
    static let notJSON = Array("{".utf8)

    func expectRefused(
        _ harness: AccountsGateway, token: String?, code: String, skipping skipped: Set<String> = []
    ) async throws {
        for route in Self.routes where !skipped.contains(route.path) {
            let response = try await harness.call(route.method, route.path, token: token, body: Self.notJSON)
            #expect(response.status == 401, "\(route.method) \(route.path): \(response)")
            #expect(response.code == code, "\(route.method) \(route.path): \(response)")
            #expect(response.retryable == false, "\(route.method) \(route.path): \(response)")
        }
    }

    @Test func everyCallerRouteRefusesARequestWithoutAToken() async throws {
        try await withAccountsGateway { harness in
            try await expectRefused(harness, token: nil, code: "unauthorized")
            // The positive control: with the token the same request gets past the gate.
            let session = try await harness.signUpAnonymous()
            let push = try await harness.call("POST", "/v1/push", token: session.accessToken, body: Self.notJSON)
            #expect(push.status == 400 && push.code == "invalid_json", "\(push)")
        }
    }

    @Test func everyCallerRouteRefusesAnExpiredTokenAsTokenExpired() async throws {
        try await withAccountsGateway(arguments: ["--token-leeway", "30"]) { harness in
            let session = try await harness.signUpAnonymous()
            let claims = session.claims
            let now = Int(Date().timeIntervalSince1970)
            let expired = AccessTokenClaims(
                userID: try #require(UUID(uuidString: claims["sub"] as? String ?? "")),
                sessionID: try #require(UUID(uuidString: claims["sid"] as? String ?? "")),
                deviceID: try #require(claims["did"] as? String), isAnonymous: true, issuedAt: now - 3_700,
                expiresAt: now - 100)
            try await expectRefused(
                harness, token: AccessTokenSigner(secret: testSecret).sign(expired), code: "token_expired")
        }
    }

    @Test func everyCallerRouteRefusesARevokedSessionButDeletionAsksTheDatabase() async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            let signOut = try await harness.call("POST", "/v1/auth/signout", token: session.accessToken)
            try #require(signOut.status == 204, "\(signOut)")
            try await expectRefused(
                harness, token: session.accessToken, code: "session_revoked", skipping: ["/v1/account"])
            // Deletion's gate lets a revoked session through (a retry after a lost answer),
            // so its own checks run: the body is read before the database is asked.
            let delete = try await harness.call("DELETE", "/v1/account", token: session.accessToken, body: Self.notJSON)
            #expect(delete.status == 400 && delete.code == "invalid_json", "\(delete)")
            let confirmed = try await harness.call(
                "DELETE", "/v1/account", token: session.accessToken, json: ["confirm": "DELETE"])
            #expect(confirmed.status == 401 && confirmed.code == "session_revoked", "\(confirmed)")
        }
    }
}
