import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// Integers a client controls (token claims, limits, ids) are range-checked on the way
/// in: an absurd value is answered, never a trap that takes the process down.
@Suite(.timeLimit(.minutes(5))) struct ClientIntegerTests {
    /// `exp` of 2^63 - 1, validly signed: answered by a real `ferry serve`, which goes on
    /// serving. Such a token lives no longer than the access-token lifetime after its `iat`.
    @Test func aTokenWithAnAbsurdExpIsAnsweredAndTheServerKeepsServing() async throws {
        try await AccountsDatabase.with { database in
            let port = try freePort()
            let server = try ChildProcess(
                try ferryExecutable().path, ["serve"],
                environment: [
                    "FERRY_DATABASE_URL": database.gatewayURL, "FERRY_JWT_SECRET": testSecret,
                    "FERRY_LISTEN": "127.0.0.1:\(port)", "FERRY_THREADS": "2", "FERRY_SHUTDOWN_TIMEOUT": "2",
                ])
            defer { _ = server.wait(seconds: 10) }
            defer { server.send(SIGTERM) }
            var listening = false
            for _ in 0..<200 where !listening {
                if let client = try? HTTPTestClient(port: port) {
                    client.close()
                    listening = true
                } else {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            try #require(listening, "ferry serve did not start listening within 10 s")

            let device = UUID().uuidString.lowercased()
            let signedUp = try await call("POST", "/v1/auth/anonymous", port: port, json: ["device_id": device])
            try #require(signedUp.status == 201, "\(signedUp)")
            let userID = try #require(signedUp.string("user", "id"))
            let accessToken = try #require(signedUp.string("session", "access_token"))
            let sessionID = try #require(decodeClaims(accessToken)["sid"] as? String)
            let signer = AccessTokenSigner(secret: testSecret)
            func token(issuedAt: Int, expiresAt: Int) throws -> String {
                signer.sign(
                    AccessTokenClaims(
                        userID: try #require(UUID(uuidString: userID)),
                        sessionID: try #require(UUID(uuidString: sessionID)), deviceID: device, isAnonymous: true,
                        issuedAt: issuedAt, expiresAt: expiresAt))
            }
            let now = Int(Date().timeIntervalSince1970)

            let fresh = try await call(
                "GET", "/v1/auth/user", port: port, token: try token(issuedAt: now, expiresAt: .max))
            #expect(fresh.status == 200 && fresh.string("user", "id") == userID, "\(fresh)")
            let old = try await call(
                "GET", "/v1/auth/user", port: port, token: try token(issuedAt: now - 7200, expiresAt: .max))
            #expect(old.status == 401 && old.code == "token_expired", "\(old)")
            for (issuedAt, expiresAt) in [(Int.min, Int.max), (Int.max, Int.max), (now, Int.min), (Int.min, Int.min)] {
                let answer = try await call(
                    "GET", "/v1/auth/user", port: port, token: try token(issuedAt: issuedAt, expiresAt: expiresAt))
                #expect(answer.status == 401, "iat \(issuedAt), exp \(expiresAt): \(answer)")
            }

            #expect(try get("/healthz", port: port).status == 200)
            #expect(server.isRunning, "ferry serve ended: \(String(describing: server.ended))")
        }
    }

    /// The stream's deadlines (timing wheel, `token_expiring`) come from the token's
    /// end as the check bounds it, so an `exp` of 2^63 - 1 overflows none of them.
    @Test(arguments: StreamTests.transports)
    func aStreamWithAnAbsurdExpEndsWithinTheLifetime(transport: StreamTestClient.Transport) async throws {
        try await withAccountsGateway(arguments: ["--access-token-ttl", "60", "--stream-token-warning", "3600"]) {
            harness in
            let session = try await harness.signUpAnonymous()
            let tokens = harness.gateway.accounts.tokens
            let now = Int(Date().timeIntervalSince1970)
            let token = tokens.sign(
                AccessTokenClaims(
                    userID: try #require(UUID(uuidString: session.userID)),
                    sessionID: try #require(UUID(uuidString: session.sessionID)), deviceID: session.deviceID,
                    isAnonymous: true, issuedAt: now, expiresAt: .max))
            let stream = try await harness.openStream(session, transport, token: token)
            _ = try await stream.nextMessageAsync(ofType: "hello")
            // Warned at once: the stream has 60 s plus the 30 s leeway, under the hour of warning.
            let warning = try await stream.nextMessageAsync(ofType: "token_expiring")
            let inMilliseconds = try #require(warning.int("in_ms"))
            #expect(inMilliseconds > 0 && inMilliseconds <= 90_000, "\(warning)")
            stream.close()
            #expect(try get("/healthz", port: harness.port).status == 200)
        }
    }
}
