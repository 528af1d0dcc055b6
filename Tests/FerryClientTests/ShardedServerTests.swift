import FerryAuth
import FerryTestSupport
import Foundation
import Testing

@testable import FerryClient

/// The client SDK, unchanged, against a cluster set to a shard: it keeps the `9.<token>`
/// refresh token as the opaque string it is, refreshes with it and syncs.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct ShardedServerTests {
    @Test func theClientSignsUpRefreshesAndSyncsOnShard9() async throws {
        try await DemoGateway.with { gateway in
            _ = try await gateway.rows("select 'set' from ferry.set_shard(9)")
            var configuration = FerryClient.Configuration()
            configuration.syncsAutomatically = false
            configuration.holdsCueStream = false
            let ferry = try await FerryClient(
                server: URL(string: "http://127.0.0.1:\(gateway.port)")!,
                stateDirectory: URL(fileURLWithPath: gateway.device("phone")), configuration: configuration)
            let user = try #require(ferry.user?.id)
            #expect(Shard.of(try #require(UUID(uuidString: user))) == 9, "\(user)")
            let before = try #require(await ferry.account.session)
            #expect(before.refreshToken.hasPrefix("9."), "\(before.refreshToken)")

            _ = try await ferry.account.accessToken(forceRefresh: true)
            let after = try #require(await ferry.account.session)
            #expect(after.refreshToken.hasPrefix("9.") && after.refreshToken != before.refreshToken)
            #expect(after.sessionID == before.sessionID)

            try ferry.enqueue(.upsert, into: "tasks", ["id": "t-1", "title": "on shard 9"])
            try await ferry.sync()
            #expect(try await serverIDs(gateway, "tasks", of: user) == ["t-1"])
            await ferry.close()
        }
    }
}
