import FerryTestSupport
import Foundation
import Testing

/// deploy/haproxy.cfg in front of two gateways on one database, as an operator runs it
/// (``HAProxyFront``): cues cross the gateways, a gateway's `kill -9` costs its clients
/// a reconnect and nothing else, and the per-address limits see each client's own
/// address through the PROXY protocol.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct HAProxyTests {
    /// The gateway (an index into the front's) that holds `open`'s stream: the one whose
    /// count of open streams it raised.
    func gateway(holding open: () async throws -> StreamTestClient, of front: HAProxyFront) async throws -> (
        StreamTestClient, Int
    ) {
        let before = [try await front.gateways[0].streamsOpen(), try await front.gateways[1].streamsOpen()]
        let stream = try await open()
        _ = try await stream.nextMessageAsync(ofType: "hello")
        let after = [try await front.gateways[0].streamsOpen(), try await front.gateways[1].streamsOpen()]
        let index = try #require(after.indices.first { after[$0] == before[$0] + 1 }, "\(before) → \(after)")
        return (stream, index)
    }

    /// Upserts a task as `session` with mutation `mutation` (each device's next is higher:
    /// a lower one is a duplicate), through haproxy, or on the gateway at `port` directly.
    func pushTask(
        _ session: TestSession, id: String, mutation: Int = 1, front: HAProxyFront, port: Int? = nil
    ) async throws {
        let mutations: [String: Any] = [
            "mutations": [["id": mutation, "table": "tasks", "op": "upsert", "row": ["id": id]]]
        ]
        let response =
            if let port {
                try await call("POST", "/v1/push", port: port, token: session.accessToken, json: mutations)
            } else {
                try await front.call("POST", "/v1/push", token: session.accessToken, json: mutations)
            }
        try #require(response.status == 200, "push: \(response)")
    }

    @Test func theShippedConfigurationIsValid() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-haproxy-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        // A throwaway certificate where the file expects the operator's.
        let pem = folder.appendingPathComponent("ferry.pem").path
        let made = try ChildProcess.run(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout",
                pem, "-out", pem + ".crt",
            ], timeout: 60)
        try #require(made.status == 0, "\(made.output)")
        try (try String(contentsOfFile: pem + ".crt", encoding: .utf8) + String(contentsOfFile: pem, encoding: .utf8))
            .write(toFile: pem, atomically: true, encoding: .utf8)
        let shipped = try String(contentsOfFile: TestRepository.root + "/deploy/haproxy.cfg", encoding: .utf8)
        let configuration = folder.appendingPathComponent("haproxy.cfg").path
        try shipped.replacingOccurrences(of: "/etc/haproxy/certs/ferry.pem", with: pem)
            .write(toFile: configuration, atomically: true, encoding: .utf8)
        let check = try ChildProcess.run("/usr/sbin/haproxy", ["-c", "-f", configuration], timeout: 30)
        #expect(check.status == 0, "\(check.output)")
        // What the study found matters, each said once.
        for line in [
            "timeout tunnel 1m", "option abortonclose", "retry-on conn-failure", "http-check expect status 200",
            "uri /readyz", "send-proxy-v2", "bind :443 ssl crt", "maxconn",
        ] {
            #expect(shipped.contains(line), "deploy/haproxy.cfg has no \(line)")
        }
        let settings = shipped.split(separator: "\n").filter { !$0.drop(while: { $0 == " " }).hasPrefix("#") }
        for line in ["shutdown-sessions", "redispatch", "retry-on all"] {
            #expect(!settings.contains { $0.contains(line) }, "deploy/haproxy.cfg has \(line)")
        }
    }

    @Test func cuesCrossTheGateways() async throws {
        try await HAProxyFront.with { front in
            for transport in StreamTestClient.Transport.allCases {
                let session = try await front.signUp(from: "127.0.0.2")
                let (stream, holder) = try await gateway(
                    holding: { try await front.openStream(session, transport) }, of: front)
                defer { stream.close() }
                // A write through the other gateway: its cue crosses PostgreSQL to this stream.
                let other = front.gateways[1 - holder]
                try await pushTask(session, id: "crossed-\(transport)", front: front, port: other.port)
                let cue = try await stream.nextMessageAsync(ofType: "cue")
                #expect(cue.strings("tables") == ["tasks"], "\(cue)")
            }
        }
    }

    @Test func streamsAreTunnelsThatOutliveTheClientAndServerTimeouts() async throws {
        // Heartbeats 3 s apart, haproxy's client and server timeouts 1 s: only the
        // tunnel timeout (the file's 1m) may bound a quiet stream.
        try await HAProxyFront.with(
            environment: ["FERRY_STREAM_HEARTBEAT_MS": "3000"],
            settings: ["timeout client": "1s", "timeout server": "1s"]
        ) { front in
            for transport in StreamTestClient.Transport.allCases {
                let session = try await front.signUp(from: "127.0.0.2")
                let stream = try await front.openStream(session, transport)
                defer { stream.close() }
                _ = try await stream.nextMessageAsync(ofType: "hello")
                // The write comes after seven quiet seconds (but for heartbeats), while the
                // client reads its stream and answers its pings.
                async let pushed: Void = {
                    try await Task.sleep(for: .seconds(7))
                    try await pushTask(session, id: "quiet-\(transport)", front: front)
                }()
                let cue = try await stream.nextMessageAsync(ofType: "cue")
                try await pushed
                #expect(cue.strings("tables") == ["tasks"], "\(transport)")
                #expect(stream.heartbeats >= 2, "\(transport): \(stream.heartbeats) heartbeats")
            }
        }
    }

    @Test func aKilledGatewaysClientsReconnectThroughHAProxyAndMissNothing() async throws {
        // The streams on the surviving gateway are not read while the others reconnect,
        // which on a loaded machine can outlast two heartbeats: an unanswered ping would
        // close them too_slow. Heartbeats are another test's concern, so none come here.
        let quiet = ["FERRY_STREAM_HEARTBEAT_MS": "1800000"]
        try await HAProxyFront.with(environment: quiet, settings: ["timeout tunnel": "1h"]) { front in
            // Six clients, each at its own address, each holding a stream and a cursor.
            var clients: [(session: TestSession, transport: StreamTestClient.Transport, cursor: String?)] = []
            var streams: [StreamTestClient] = []
            var holders: [Int] = []
            defer { for stream in streams { stream.close() } }
            for index in 0..<6 {
                let session = try await front.signUp(from: "127.0.0.\(20 + index)")
                let transport: StreamTestClient.Transport = index % 2 == 0 ? .webSocket : .serverSentEvents
                try await pushTask(session, id: "before-\(index)", front: front)
                let page = try await front.pull(session, cursor: nil)
                #expect(page.upserts("tasks").count == 1)
                let (stream, holder) = try await gateway(
                    holding: { try await front.openStream(session, transport) }, of: front)
                clients.append((session, transport, page.cursor))
                streams.append(stream)
                holders.append(holder)
            }
            // leastconn spreads the streams over both gateways.
            #expect(Set(holders) == [0, 1], "\(holders)")
            let killed = holders[0]
            defer {
            }
            let survivor = front.gateways[1 - killed]
            try await front.gateways[killed].kill()

            for index in clients.indices where holders[index] == killed {
                // haproxy closes the client's side when the gateway's goes.
                _ = try? await streams[index].nextCloseAsync()
                streams[index].close()
                let session = clients[index].session
                let transport = clients[index].transport
                // Reconnect as a client does, until haproxy's check has taken the dead one out.
                let reopened = try await eventually("client \(index) reconnected", seconds: 20) {
                    () async throws -> StreamTestClient? in
                    guard let stream = try? await front.openStream(session, transport) else { return nil }
                    guard (try? await stream.nextMessageAsync(ofType: "hello")) != nil else {
                        stream.close()
                        return nil
                    }
                    return stream
                }
                streams[index] = reopened
            }
            #expect(try await survivor.streamsOpen() == clients.count)

            // Writes after the crash reach every client, wherever its stream was.
            for (index, client) in clients.enumerated() {
                try await pushTask(client.session, id: "after-\(index)", mutation: 2, front: front)
                let cue = try await streams[index].nextMessageAsync(ofType: "cue")
                #expect(cue.strings("tables") == ["tasks"])
                // The client's pull from its cursor brings what the database holds beyond it.
                let page = try await front.pull(client.session, cursor: client.cursor)
                let pulled = Set(page.upserts("tasks").compactMap { $0["id"] as? String })
                #expect(pulled == ["after-\(index)"], "client \(index)")
                #expect(try await front.tasks(of: client.session) == ["before-\(index)", "after-\(index)"])
            }
        }
    }

    @Test func perAddressLimitsSeeEachClientsAddressThroughPROXY() async throws {
        try await HAProxyFront.with(environment: ["FERRY_ANONYMOUS_SIGNUPS_PER_HOUR": "2"]) { front in
            // Each gateway counts its own sign-ups: 127.0.0.2 spends its two on both.
            var statuses: [Int] = []
            while statuses.filter({ $0 == 201 }).count < 4 && statuses.count < 20 {
                statuses.append(
                    try await front.call(
                        "POST", "/v1/auth/anonymous", json: ["device_id": UUID().uuidString], source: "127.0.0.2"
                    ).status)
            }
            #expect(statuses.filter { $0 == 201 }.count == 4, "\(statuses)")
            #expect(statuses.allSatisfy { $0 == 201 || $0 == 429 }, "\(statuses)")
            for _ in 0..<2 {
                let spent = try await front.call(
                    "POST", "/v1/auth/anonymous", json: ["device_id": UUID().uuidString], source: "127.0.0.2")
                #expect(spent.status == 429, "\(spent)")
            }
            // Another client behind the same haproxy is not limited by it.
            for source in ["127.0.0.3", "127.0.0.4"] {
                let response = try await front.call(
                    "POST", "/v1/auth/anonymous", json: ["device_id": UUID().uuidString], source: source)
                #expect(response.status == 201, "\(source): \(response)")
            }
            // The request log names the client, not haproxy.
            try await eventually("the sign-ups' log lines", seconds: 10) {
                let log = front.gateways.map(\.serveLog).joined()
                return ["127.0.0.2", "127.0.0.3", "127.0.0.4"].allSatisfy {
                    log.contains("route=/v1/auth/anonymous status=201 ") && log.contains("remote=\($0):")
                }
            }
            #expect(!front.gateways.map(\.serveLog).joined().contains("remote=\(HAProxyFront.proxyAddress)"))
        }
    }
}
