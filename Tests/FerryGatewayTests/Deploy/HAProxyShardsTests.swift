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

/// Two migrated databases (the tasks example), the second set to shard 1, a gateway on
/// each (the second with its own JWT secret), and haproxy with deploy/haproxy-shards.cfg
/// in front; runs `body` with haproxy's port.
private func withShards(_ body: (Int, TestShards) async throws -> Void) async throws {
    try await AccountsDatabase.with(examples: ["tasks"]) { shard0 in
        try await AccountsDatabase.with(examples: ["tasks"]) { shard1 in
            try await shard1.admin.execute("select ferry.set_shard(1)")
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
                "ferry-haproxy-shards-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            var gateways: [ServedGateway] = []
            defer { for gateway in gateways { gateway.stop() } }
            for (shard, database) in [shard0, shard1].enumerated() {
                var environment = ["FERRY_TRUSTED_PROXIES": HAProxyFront.proxyAddress]
                if shard == 1 { environment["FERRY_JWT_SECRET"] = String(repeating: "shard one secret ", count: 3) }
                let gateway = ServedGateway(
                    name: "shard\(shard)-gw1", port: try freePort(), databaseURL: database.gatewayURL, folder: folder,
                    environment: environment)
                gateways.append(gateway)
                try await gateway.start()
            }
            let port = try freePort()
            try await HAProxyFront.serve(try shardsConfig(port: port, gateways: gateways), port: port, in: folder) {
                try await body(port, TestShards(databases: [shard0, shard1], gateways: gateways))
            }
        }
    }
}

/// deploy/haproxy.cfg's global and defaults sections as the HAProxyFront tests run them,
/// then deploy/haproxy-shards.cfg with the test's addresses: its bind on loopback, no TLS
/// redirect, each server line on the test's gateway of that name.
private func shardsConfig(port: Int, gateways: [ServedGateway]) throws -> String {
    let base = try HAProxyFront.config(port: port, gateways: [])
    let head = try #require(base.range(of: "\nfrontend ferry")).lowerBound
    let shipped = try String(contentsOfFile: TestRepository.root + "/deploy/haproxy-shards.cfg", encoding: .utf8)
    var lines = [String(base[..<head])]
    for line in shipped.split(separator: "\n", omittingEmptySubsequences: false) {
        let words = line.split(separator: " ")
        switch words.first {
        case "bind":
            if line.contains(" ssl ") { lines.append("    bind 127.0.0.1:\(port)") }
        case "http-request" where line.contains("redirect"):
            continue
        case "server":
            let gateway = try #require(gateways.first { $0.name == words[1] }, "no gateway \(words[1])")
            lines.append("    server \(gateway.name) 127.0.0.1:\(gateway.port)")
        case "default-server":
            lines.append(line + " source \(HAProxyFront.proxyAddress)")
        default:
            lines.append(String(line))
        }
    }
    return lines.joined(separator: "\n")
}
