import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

extension AccountsGateway {
    /// Opens a stream with `session`'s token (or `token`).
    func openStream(
        _ session: TestSession, _ transport: StreamTestClient.Transport, token: String? = nil,
        tokenInQuery: Bool = false, receiveBufferBytes: Int32? = nil, timeout: Double = 15
    ) async throws -> StreamTestClient {
        let port = port
        return try await offload {
            try StreamTestClient(
                port: port, transport: transport, token: token ?? session.accessToken, tokenInQuery: tokenInQuery,
                timeout: timeout, receiveBufferBytes: receiveBufferBytes)
        }
    }

    /// A token for `session` that expires `seconds` from now, signed with the gateway's secret.
    func token(for session: TestSession, expiresIn seconds: Int) -> String {
        let now = Int(Date().timeIntervalSince1970)
        var claims = gateway.accounts.tokens.claims(
            userID: UUID(uuidString: session.userID)!, sessionID: UUID(uuidString: session.sessionID)!,
            deviceID: session.deviceID, isAnonymous: true, now: now - 10)
        claims.expiresAt = now + seconds
        return gateway.accounts.tokens.sign(claims)
    }

    /// Upserts one task as `session`'s device (the `tasks` example app).
    func pushTask(_ session: TestSession, id: String) async throws {
        let response = try await call(
            "POST", "/v1/push", token: session.accessToken,
            json: [
                "mutations": [
                    ["id": Int.random(in: 1...1_000_000), "table": "tasks", "op": "upsert", "row": ["id": id]]
                ]
            ])
        try #require(response.status == 200, "push: \(response)")
    }

    /// Polls a metric (``eventuallyHolds(seconds:_:)``, 10 s at most) until it equals `expected`; returns its last value.
    func metric(_ name: String, labels: String? = nil, becomes expected: Int) async throws -> Int {
        var value = 0
        _ = try await eventuallyHolds(seconds: 10) {
            value = try await metric(name, labels: labels)
            return value == expected
        }
        return value
    }

    /// A counter or gauge from `/metrics` (summed over its series with `labels`, if given).
    func metric(_ name: String, labels: String? = nil) async throws -> Int {
        try await FerryGatewayTests.metric(name, labels: labels, port: port)
    }
}

/// A counter or gauge from the `/metrics` of the gateway on `port` (summed over its series
/// with `labels`, if given).
func metric(_ name: String, labels: String? = nil, port: Int) async throws -> Int {
    metricTotal(name, labels: labels, in: try await call("GET", "/metrics", port: port).raw.text)
}
