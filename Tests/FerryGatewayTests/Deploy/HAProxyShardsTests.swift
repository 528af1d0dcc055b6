import FerryAuth
import FerryTestSupport
import Foundation
import Testing

/// deploy/haproxy-shards.cfg in front of two shards, each a database of its own
/// (`ferry.set_shard` 0 and 1) with its own `ferry serve` and JWT secret: sign-ups land
/// on both, and every later request of a user (push, pull, refresh, a stream by header
/// or by `?access_token=`) reaches its shard.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct HAProxyShardsTests {
    @Test func everyRequestOfAUserReachesItsShard() async throws {
        try await withShards { port, shards in
            // Round robin: sign-ups land on both shards.
            var users: [(session: TestSession, shard: Int)] = []
            while Set(users.map(\.shard)).count < 2 && users.count < 10 {
                let session = try await HAProxyFront.signUp(port: port)
                let shard = Shard.of(try #require(UUID(uuidString: session.userID)))
                #expect(try await shards[shard].userExists(session.userID), "user of shard \(shard) is there")
                #expect(try await !shards[1 - shard].userExists(session.userID))
                #expect(shard == 0 ? !session.refreshToken.contains(".") : session.refreshToken.hasPrefix("1."))
                users.append((session, shard))
            }
            #expect(Set(users.map(\.shard)) == [0, 1], "\(users.map(\.shard))")

            for (index, (session, shard)) in users.enumerated() {
                let mutations: [String: Any] = [
                    "mutations": [["id": 1, "table": "tasks", "op": "upsert", "row": ["id": "task-\(index)"]]]
                ]
                let pushed = try await HAProxyFront.call(
                    "POST", "/v1/push", port: port, token: session.accessToken, json: mutations)
                #expect(pushed.status == 200, "push of shard \(shard): \(pushed)")
                #expect(
                    try await shards[shard].value("select count(*) from public.tasks where id = $1", ["task-\(index)"])
                        == "1")
                let pulled = try await HAProxyFront.call("GET", "/v1/pull", port: port, token: session.accessToken)
                #expect(pulled.status == 200, "pull of shard \(shard): \(pulled)")

                let refreshed = try await HAProxyFront.call(
                    "POST", "/v1/auth/refresh", port: port, json: ["refresh_token": session.refreshToken])
                #expect(refreshed.status == 200, "refresh of shard \(shard): \(refreshed)")
                let successor = try #require(refreshed.string("session", "refresh_token"))
                #expect(shard == 0 ? !successor.contains(".") : successor.hasPrefix("1."), "\(successor)")
                let access = try #require(refreshed.string("session", "access_token"))

                // Streams (both transports, by header and by query): a push's cue reaches
                // them only on its shard.
                var mutation = 1
                for transport in StreamTestClient.Transport.allCases {
                    for tokenInQuery in [false, true] {
                        let stream = try await offload {
                            try StreamTestClient(
                                port: port, transport: transport, token: access, tokenInQuery: tokenInQuery)
                        }
                        defer { stream.close() }
                        _ = try await stream.nextMessageAsync(ofType: "hello")
                        mutation += 1
                        let next: [String: Any] = [
                            "mutations": [
                                ["id": mutation, "table": "tasks", "op": "upsert", "row": ["id": "cue-\(index)"]]
                            ]
                        ]
                        let pushed = try await HAProxyFront.call(
                            "POST", "/v1/push", port: port, token: access, json: next)
                        #expect(pushed.status == 200, "\(pushed)")
                        let cue = try await stream.nextMessageAsync(ofType: "cue")
                        #expect(
                            cue.strings("tables") == ["tasks"], "shard \(shard), \(transport), query \(tokenInQuery)")
                    }
                }
            }

            // Each shard signs with its own secret: a token sent to the other shard's gateway
            // directly is refused there.
            let shard1User = try #require(users.first { $0.shard == 1 }).session
            let elsewhere = try await FerryTestSupport.call(
                "GET", "/v1/pull", port: shards.gateways[0].port, token: shard1User.accessToken)
            #expect(elsewhere.status == 401, "\(elsewhere)")
            // A refresh token with another shard's prefix reaches that shard, which does not know it.
            let shard0User = try #require(users.first { $0.shard == 0 }).session
            let misrouted = try await HAProxyFront.call(
                "POST", "/v1/auth/refresh", port: port, json: ["refresh_token": "1.\(shard0User.refreshToken)"])
            #expect(misrouted.status == 401 && misrouted.code == "unauthorized", "\(misrouted)")
        }
    }
}

/// Two shards: the databases, and the gateway of each.
struct TestShards {
    let databases: [AccountsDatabase]
    let gateways: [ServedGateway]

    subscript(shard: Int) -> AccountsDatabase { databases[shard] }
}

/// Two migrated databases (the tasks example), the second set to shard 1, and
/// ``HAProxyFront/withShards(databaseURLs:environment:_:)`` on them; runs `body` with
/// haproxy's port.
private func withShards(_ body: (Int, TestShards) async throws -> Void) async throws {
    try await AccountsDatabase.with(examples: ["tasks"]) { shard0 in
        try await AccountsDatabase.with(examples: ["tasks"]) { shard1 in
            try await shard1.admin.execute("select ferry.set_shard(1)")
            try await HAProxyFront.withShards(databaseURLs: [shard0.gatewayURL, shard1.gatewayURL]) {
                port, gateways in
                try await body(port, TestShards(databases: [shard0, shard1], gateways: gateways))
            }
        }
    }
}
