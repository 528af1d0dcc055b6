import FerryTestSupport
import Foundation
import Testing

@testable import FerryClient

/// A refresh whose answer is lost after the server rotated the token: the client sends the
/// same token again within the server's grace window, and keeps its account.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct LostRefreshAnswerTests {
    @Test func aRefreshWhoseAnswerWasLostIsRetriedAndTheAccountKept() async throws {
        try await DemoGateway.with { gateway in
            let proxy = try AnswerDroppingProxy(upstream: gateway.port, dropping: "POST /v1/auth/refresh")
            defer { proxy.close() }
            var configuration = FerryClient.Configuration()
            configuration.syncsAutomatically = false
            configuration.holdsCueStream = false
            configuration.requestTimeout = 10
            let lines = Shared<[String]>([])
            configuration.log = { line in lines.withLock { $0.append(line) } }
            let ferry = try await FerryClient(
                server: URL(string: proxy.url)!, stateDirectory: URL(fileURLWithPath: gateway.device("phone")),
                configuration: configuration)
            let user = try #require(ferry.user?.id)
            let before = try #require(await ferry.account.session)

            let token = try await ferry.account.accessToken(forceRefresh: true)
            #expect(proxy.dropped == 1, "the first refresh's answer was lost")
            #expect(proxy.requests.filter { $0.hasPrefix("POST /v1/auth/refresh") }.count == 2, "\(proxy.requests)")
            let after = try #require(await ferry.account.session, "the account was kept: \(lines.withLock { $0 })")
            #expect(after.sessionID == before.sessionID && after.userID == user)
            // The new refresh token (an access token of the same second can be the same text).
            #expect(after.refreshToken != before.refreshToken && token == after.accessToken)

            try ferry.enqueue(.upsert, into: "tasks", ["id": "t-1", "title": "kept"])
            try await ferry.sync()
            #expect(try await serverIDs(gateway, "tasks", of: user) == ["t-1"])
            _ = try await ferry.account.accessToken(forceRefresh: true)
            #expect(
                try await gateway.rows(
                    "select count(*)::text from ferry.sessions where user_id = $1 and revoked_at is not null", [user])
                    == [["0"]])
            await ferry.close()
        }
    }
}
