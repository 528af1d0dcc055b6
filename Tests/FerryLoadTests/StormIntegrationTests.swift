import FerryLoad
import FerryTestSupport
import Foundation
import Testing

/// `ferry-load storm` against a real gateway on a real database: a small storm in which
/// every device has the shared row through a pull, and whose figures parse.
@Suite struct StormIntegrationTests {
    /// The tables the storm writes, as bench/storm.sh makes them.
    static let tables = [
        "create table public.bench_items (id text primary key, user_id uuid not null, n int)",
        "select ferry.register_table('public.bench_items', strategy => 'lww')",
        "create table public.bench_news (id int primary key, body text)",
        "select ferry.register_table('public.bench_news', strategy => 'shared')",
    ]

    @Test func everyDevicePullsTheSharedRow() async throws {
        try await MigratedDatabase.with { database in
            for statement in Self.tables { _ = try await database.admin.query(statement) }
            try await TestGateway.with(
                databaseURL: database.gatewayURL, arguments: FleetIntegrationTests.gatewayArguments
            ) { _, port in
                // 50 devices in two worker processes, so the workers' lines are summed too.
                let (child, log) = try FleetIntegrationTests.startLoad([
                    "storm", "--urls", "http://127.0.0.1:\(port)", "--devices", "50", "--database-url",
                    database.database.url, "--rounds", "2", "--ordinary-pulls", "10", "--devices-per-process", "30",
                    "--pause-seconds", "0.2", "--round-timeout", "60", "--ready-timeout", "60",
                ])
                let (status, output) = try await FleetIntegrationTests.finish(child, log)
                #expect(status == 0, "\(output.suffix(4000))")
                let figures = Self.figures(output)
                #expect(figures["storm_devices"] == 50, "\(output)")
                #expect(figures["storm_workers"] == 2, "\(output)")
                #expect(figures["storm_rounds"] == 2, "\(output)")
                #expect(figures["storm_devices_with_row"] == 50, "\(output)")
                #expect(figures["ordinary_pulls"] == 10, "\(output)")
                // Times start when the writer reads its statement's answer: a device cued and
                // answered sooner has a time a little below zero.
                for name in ["storm_device_ms_p50", "storm_device_ms_p99", "storm_last_device_ms"] {
                    let value = figures[name]
                    #expect(value != nil && value!.isFinite, "\(name) in \(output)")
                }
                for name in [
                    "storm_postgres_cpu_ms", "storm_gateway_cpu_ms", "storm_pulls",
                    "ordinary_pulls_100_postgres_cpu_ms", "storm_to_ordinary_pulls_100_postgres_cpu_ratio",
                ] {
                    let value = figures[name]
                    #expect(value != nil && value!.isFinite && value! >= 0, "\(name) in \(output)")
                }
                // The database is on this machine: its CPU was measured (the writer's backend's parent).
                #expect((figures["storm_postgres_cpu_ms"] ?? 0) > 0, "\(output)")
                #expect((figures["ordinary_pulls_100_postgres_cpu_ms"] ?? 0) > 0, "\(output)")
                // Every device pulled at least once in each storm, and the storm is the only change.
                #expect((figures["storm_pulls"] ?? 0) >= 50, "\(output)")
                let rounds = output.split(separator: "\n").filter { $0.hasPrefix("storm_round ") }
                #expect(rounds.count == 2, "\(output)")
                for round in rounds { #expect(round.contains("devices_with_change 50/50"), "\(round)") }
                let ordinary = output.split(separator: "\n").filter { $0.hasPrefix("ordinary_round ") }
                for round in ordinary { #expect(round.contains("devices_with_change 10/10"), "\(round)") }
                // A pull, not a cue or the database, told each device: the shared row holds the last round's value.
                let rows = try await database.admin.query("select body from public.bench_news where id = 1")
                #expect(rows[0, 0]?.hasSuffix("-2") == true)
            }
        }
    }

    /// The `name value` lines of the output whose value is a number.
    static func figures(_ output: String) -> [String: Double] {
        var figures: [String: Double] = [:]
        for line in output.split(separator: "\n") {
            let words = line.split(separator: " ")
            if words.count == 2, let value = Double(words[1]) { figures[String(words[0])] = value }
        }
        return figures
    }
}

/// What counts as a storm device having the change: rows in a pull answer, nothing else.
@Suite struct PullPageTests {
    @Test func matchesRowsOfTheTableWithTheValue() throws {
        let body = """
            {"changes": {"bench_news": {"upserts": [{"id": 1, "body": "storm-a-1"}, {"id": 2, "body": "other"}]},
                         "bench_items": {"upserts": [{"id": "u-1", "n": 7}, {"id": "u-2", "n": 7}, {"id": "u-3", "n": 8}],
                                         "deletes": [{"id": "u-4"}]}},
             "cursor": "c2", "has_more": true, "last_mutation_id": 0}
            """
        let page = try PullPage(Array(body.utf8))
        #expect(page.cursor == "c2")
        #expect(page.hasMore)
        #expect(
            page.keys(matching: ExpectedChange(table: "bench_news", column: "body", value: "storm-a-1", rows: 1)) == [
                "1"
            ])
        #expect(
            page.keys(matching: ExpectedChange(table: "bench_items", column: "n", value: "7", rows: 2)) == [
                "u-1", "u-2",
            ])
        #expect(
            page.keys(matching: ExpectedChange(table: "bench_news", column: "body", value: "storm-a-2", rows: 1))
                .isEmpty)
        #expect(
            page.keys(matching: ExpectedChange(table: "tasks", column: "body", value: "storm-a-1", rows: 1)).isEmpty)
    }

    @Test func refusesAnAnswerWithoutCursor() {
        #expect(throws: PullPageError.self) { try PullPage(Array(#"{"changes": {}}"#.utf8)) }
        #expect(throws: (any Error).self) { try PullPage(Array("not json".utf8)) }
    }
}
