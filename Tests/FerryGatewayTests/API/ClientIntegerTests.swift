import FerryAuth
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// Integers a client controls (token claims, limits, ids) are range-checked on the way
/// in: an absurd value is answered, never a trap that takes the process down.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct ClientIntegerTests {
    /// `exp` of 2^63 - 1, validly signed: answered by a real `ferry serve`, which goes on
    /// serving. Such a token lives no longer than the access-token lifetime after its `iat`.
    @Test func aTokenWithAnAbsurdExpIsAnsweredAndTheServerKeepsServing() async throws {
        try await AccountsDatabase.with { database in
            let port = try freePort()
            let server = try ChildProcess(
                try TestRepository.ferryExecutable().path, ["serve"],
                environment: [
                    "FERRY_DATABASE_URL": database.gatewayURL, "FERRY_JWT_SECRET": testSecret,
                    "FERRY_LISTEN": "127.0.0.1:\(port)", "FERRY_THREADS": "2", "FERRY_SHUTDOWN_TIMEOUT": "2",
                ])
            defer { _ = server.wait(seconds: 10) }
            defer { server.send(SIGTERM) }
            let listening = try await eventuallyHolds(seconds: 10) {
                guard let client = try? HTTPTestClient(port: port) else { return false }
                client.close()
                return true
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
            // Issued in the future: not a token this server would sign. Else past its end:
            // issued before the lifetime, or expired.
            let refusals = [
                (Int.min, Int.max, "token_expired"), (Int.max, Int.max, "unauthorized"),
                (now, Int.min, "token_expired"), (Int.min, Int.min, "token_expired"),
            ]
            for (issuedAt, expiresAt, code) in refusals {
                let answer = try await call(
                    "GET", "/v1/auth/user", port: port, token: try token(issuedAt: issuedAt, expiresAt: expiresAt))
                #expect(answer.status == 401 && answer.code == code, "iat \(issuedAt), exp \(expiresAt): \(answer)")
            }

            #expect(try get("/healthz", port: port).status == 200)
            #expect(server.isRunning, "ferry serve ended: \(String(describing: server.ended))")
        }
    }

    /// The stream's deadlines (timing wheel, `token_expiring`) come from the token's
    /// end as the check bounds it, so an `exp` of 2^63 - 1 overflows none of them.
    @Test(arguments: StreamTestClient.Transport.allCases)
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

    /// Integers the SQL side reads (a push `id`, the pull `limit`, an integer lock key,
    /// `force`) beyond their types are final `400`s, never a retryable `5xx`.
    @Test func integersBeyondTheirTypesAreFinal400s() async throws {
        try await withAccountsGateway { server in
            try await server.database.admin.execute(
                """
                create table public.boards (user_id uuid not null, board int not null, primary key (user_id, board));
                select ferry.register_table('boards', 'device_lock');
                """)
            let session = try await server.signUpAnonymous()
            for id in ["9223372036854775808", "9223372036854775807", "1000000000000000000", "1e400", "-1", "1.5"] {
                let response = try await raw(
                    "POST", "/v1/push", port: server.port, token: session.accessToken,
                    body: #"{"mutations":[{"id":\#(id),"table":"boards","op":"upsert","row":{"board":1}}]}"#)
                #expect(response.status == 400 && response.code == "invalid_request", "id \(id): \(response)")
            }
            for limit in ["2147483648", "99999999999999999999", "-9223372036854775809"] {
                let response = try await server.call("GET", "/v1/pull?limit=\(limit)", token: session.accessToken)
                #expect(response.status == 400 && response.code == "invalid_request", "limit \(limit): \(response)")
            }
            for key in ["2147483648", "99999999999999999999"] {
                let response = try await server.call(
                    "POST", "/v1/locks/boards/\(key)/claim", token: session.accessToken)
                #expect(response.status == 400 && response.code == "invalid_request", "key \(key): \(response)")
            }
            let force = try await raw(
                "POST", "/v1/locks/boards/1/claim", port: server.port, token: session.accessToken,
                body: #"{"force": 99999999999999999999}"#)
            #expect(force.status == 400 && force.code == "invalid_request", "\(force)")
            #expect(
                try await server.database.value("select count(*) from ferry.devices where last_mutation_id > 0") == "0")
        }
    }

    /// Sends `body` as it is (JSON numbers no encoder would write).
    func raw(_ method: String, _ path: String, port: Int, token: String, body: String) async throws -> APIResponse {
        let raw = try await offload {
            let client = try HTTPTestClient(port: port, timeout: 15)
            defer { client.close() }
            return try client.request(
                method, path, headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")],
                body: Array(body.utf8))
        }
        return APIResponse(raw: raw)
    }
}
