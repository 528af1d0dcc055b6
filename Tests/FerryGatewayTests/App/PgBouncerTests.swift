import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// docs/OPERATIONS.md, "Through pgbouncer": Debian's pgbouncer in transaction mode in
/// front of the request database, statements unnamed (`--prepared-statements off`), the
/// listener direct. And the one thing that cannot work through it: a listener behind a
/// transaction pooler, refused at start.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct PgBouncerTests {
    @Test func theGatewayServesThroughPgBouncerInTransactionMode() async throws {
        try await AccountsDatabase.with(examples: ["tasks"]) { database in
            // Two server connections for the gateway's eight client connections: every
            // transaction may land on a session another client prepared statements on.
            let bouncer = try PgBouncerTestServer(
                inFrontOf: database.gatewayURL, users: ["ferry_gateway"], poolMode: "transaction", poolSize: 2)
            try await database.admin.execute(
                """
                create function public.slow_task() returns trigger language plpgsql as $$
                begin perform pg_sleep(30); return new; end $$;
                create trigger slow_task before insert on public.tasks for each row when (new.title = 'slow')
                    execute function public.slow_task();
                """)
            let arguments = [
                "--prepared-statements", "off", "--listen-database-url", database.gatewayURL,
                "--statement-timeout-ms", "1000", "--threads", "2", "--pool-size", "4",
            ]
            try await withStartedGateway(databaseURL: try bouncer.url(database.gatewayURL), arguments: arguments) {
                gateway, port in
                let server = AccountsGateway(database: database, gateway: gateway, port: port)
                _ = try await eventually("/readyz 200 through pgbouncer", seconds: 20) {
                    try await server.call("GET", "/readyz").status == 200 ? true : nil
                }
                let ana = try await server.signUpAnonymous()
                let stream = try await server.openStream(ana, .webSocket)
                _ = try await stream.nextMessageAsync(ofType: "hello")
                try await server.pushTask(ana, id: "t-1")
                #expect(try await stream.nextMessageAsync(ofType: "cue").string("origin") == ana.deviceID)
                // Many at once, so that the pooler's two sessions serve them all in turn.
                let users = try await withThrowingTaskGroup(of: TestSession.self) { group in
                    for _ in 0..<8 { group.addTask { try await server.signUpAnonymous() } }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                let pages = try await withThrowingTaskGroup(of: Int.self) { group in
                    for (index, user) in users.enumerated() {
                        group.addTask {
                            try await server.pushTask(user, id: "u-\(index)")
                            return try await server.pull(user).upserts("tasks").count
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                #expect(pages == Array(repeating: 1, count: 8), "\(bouncer.log)")
                // The timeout travels in the transaction: the pooler passes no start-up options.
                let slow = try await server.call(
                    "POST", "/v1/push", token: ana.accessToken,
                    json: [
                        "mutations": [
                            ["id": 2_000_000, "table": "tasks", "op": "upsert", "row": ["id": "t-2", "title": "slow"]]
                        ]
                    ])
                #expect(slow.status == 503 && slow.code == "unavailable", "\(slow)")
                #expect(try await database.sleepingBackends() == 0, "cut by the server's statement_timeout")
                #expect(try await server.call("GET", "/readyz").status == 200)
            }
        }
    }

    @Test func aListenerThroughATransactionPoolerIsRefusedAtStart() async throws {
        try await AccountsDatabase.with { database in
            let bouncer = try PgBouncerTestServer(
                inFrontOf: database.gatewayURL, users: ["ferry_gateway"], poolMode: "transaction", poolSize: 2)
            let log = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-\(UUID().uuidString).log")
                .path
            defer { try? FileManager.default.removeItem(atPath: log) }
            // FERRY_LISTEN_DATABASE_URL defaults to FERRY_DATABASE_URL: the pooler.
            let child = try ChildProcess(
                try TestRepository.ferryExecutable().path, ["serve"],
                environment: [
                    "FERRY_DATABASE_URL": try bouncer.url(database.gatewayURL), "FERRY_JWT_SECRET": testSecret,
                    "FERRY_LISTEN": "127.0.0.1:\(try freePort())", "FERRY_THREADS": "1",
                    "FERRY_PREPARED_STATEMENTS": "off", "FERRY_DATABASE_WAIT": "20s",
                ], output: log, errors: log)
            let ended = child.wait(seconds: 60)
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(ended.ending == .exited(1) && !ended.killed, "\(text)")
            #expect(text.contains("could not start") && text.contains("FERRY_LISTEN_DATABASE_URL"), "\(text)")
            #expect(text.contains("received no NOTIFY it sent itself"), "\(text)")
            #expect(!text.contains("\"serving\"") && !text.contains(" serving "), "\(text)")
            // A gateway that serves anyway (in process, no start-up check): /readyz says why not.
            try await withGateway(
                databaseURL: try bouncer.url(database.gatewayURL), arguments: ["--prepared-statements", "off"]
            ) { port in
                let response = try await eventually("/readyz naming the listener", seconds: 20) {
                    let answer = try get("/readyz", port: port)
                    return answer.text.contains("listener receives no notifications") ? answer : nil
                }
                #expect(response.status == 503, "\(response.text)")
            }
        }
    }
}
