import FerryCommandLine
import FerryGateway
import FerryTestSupport
import Foundation
import Testing

@Suite(.hangLimit, .tags(.database), .tagSelection) struct GatewayTests {
    /// Asks `/readyz` until it answers 200 or about five seconds pass (the listener
    /// connects in the background); returns the last answer.
    func readyz(port: Int) async throws -> HTTPTestResponse {
        var response = try get("/readyz", port: port)
        _ = try await eventuallyHolds(seconds: 5) {
            response = try get("/readyz", port: port)
            return response.status == 200
        }
        return response
    }

    @Test func readyzAnswers200OnceDatabaseAndListenerAreUp() async throws {
        try await AccountsDatabase.with { database in
            try await withGateway(databaseURL: database.gatewayURL) { port in
                #expect(try get("/healthz", port: port).text == #"{"status":"ok"}"#)
                let ready = try await readyz(port: port)
                #expect(ready.text == #"{"status":"ready"}"#)
            }
        }
    }

    @Test func readyzAnswers503WithoutConnectionDetailsWhenTheDatabaseIsUnreachable() async throws {
        // Port 1 on loopback refuses connections: the pool and the listener both fail.
        try await withGateway(databaseURL: "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2") { port in
            let response = try get("/readyz", port: port)
            #expect(response.status == 503)
            #expect(response.text.contains(#""code":"unavailable""#))
            #expect(response.text.contains(#""retryable":true"#))
            #expect(response.text.contains("database is not reachable"))
            // libpq's text names the host, the port and the reason: that is for the log.
            for detail in ["127.0.0.1", "port", "refused", "nobody"] {
                #expect(!response.text.lowercased().contains(detail), "\(response.text)")
            }
            #expect(try get("/healthz", port: port).status == 200)
        }
    }

    @Test func readyzIsNotReadyOnADatabaseNeverMigrated() async throws {
        try await TestDatabase.with { database in
            try await withGateway(databaseURL: database.url) { port in
                let response = try await readyz(port: port)
                #expect(response.status == 503)
                #expect(response.text.contains("database schema is not at this gateway's version"), "\(response.text)")
            }
        }
    }

    @Test func readyzIsNotReadyWhileTheSchemaIsBehindTheBinary() async throws {
        try await AccountsDatabase.with { database in
            try await withGateway(databaseURL: database.gatewayURL) { port in
                #expect(try await readyz(port: port).status == 200)
                try await database.setSchemaVersion(Ferry.requiredSchemaVersion - 1)
                let behind = try get("/readyz", port: port)
                #expect(behind.status == 503)
                #expect(behind.text.contains("database schema is not at this gateway's version"), "\(behind.text)")
                try await database.setSchemaVersion(Ferry.requiredSchemaVersion)
                #expect(try get("/readyz", port: port).status == 200)
            }
        }
    }

    /// A database migrated by a newer version (a rolling deploy migrates before it
    /// replaces the gateways) still serves this one.
    @Test func readyzIsReadyWhileTheSchemaIsNewerThanTheBinary() async throws {
        try await AccountsDatabase.with { database in
            try await database.setSchemaVersion(Ferry.requiredSchemaVersion + 1)
            try await withGateway(databaseURL: database.gatewayURL) { port in
                let response = try await readyz(port: port)
                #expect(response.status == 200, "\(response.text)")
            }
        }
    }

    @Test func metricsCountRequestsFromEveryLoop() async throws {
        try await TestDatabase.with { database in
            try await withGateway(databaseURL: database.url) { port in
                // Separate connections spread over both loops (SO_REUSEPORT).
                for _ in 0..<20 { #expect(try get("/healthz", port: port).status == 200) }
                #expect(try get("/no/such/path", port: port).status == 404)
                let metrics = try get("/metrics", port: port)
                #expect(metrics.status == 200)
                #expect(metrics.header("Content-Type")?.hasPrefix("text/plain; version=0.0.4") == true)
                #expect(metrics.text.contains(#"ferry_http_requests_total{route="/healthz",status="200"} 20"#))
                #expect(metrics.text.contains(#"ferry_http_requests_total{route="unmatched",status="404"} 1"#))
                #expect(metrics.text.contains(#"ferry_http_request_duration_seconds_count{route="/healthz"} 20"#))
                #expect(metrics.text.contains("ferry_http_connections_total 22\n"))
                // Earlier clients' closes may not have reached the server yet: at least this one is open.
                let open = metrics.text.split(separator: "\n").first { $0.hasPrefix("ferry_http_open_connections ") }
                #expect(open.flatMap { Int($0.split(separator: " ")[1]) }.map { (1...22).contains($0) } == true)
                // The pool's gauges are there; their values depend on background work
                // (the revoked-session reload when the listener connects).
                for gauge in ["ferry_db_pool_in_use ", "ferry_db_pool_idle ", "ferry_db_pool_waiting "] {
                    #expect(metrics.text.contains("\n" + gauge))
                }
            }
        }
    }
}
