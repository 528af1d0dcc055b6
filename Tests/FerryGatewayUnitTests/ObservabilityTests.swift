import FerryGateway
import FerryTestSupport
import Foundation
import Testing

@Suite(.tagSelection) struct ObservabilityTests {
    /// Runs `body` with a logger writing into a pipe and returns what it wrote.
    private func captured(
        _ format: Logger.Format, minimumLevel: Logger.Level = .info, _ body: (Logger) -> Void
    ) throws -> String {
        let pipe = Pipe()
        let logger = Logger(
            format: format, minimumLevel: minimumLevel, fileDescriptor: pipe.fileHandleForWriting.fileDescriptor)
        body(logger)
        try pipe.fileHandleForWriting.close()
        return String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }

    @Test func jsonLogLinesAreValidJSONWithEscapedValues() throws {
        let output = try captured(.json) { logger in
            logger.log(.warning, "listener \"down\"", ["error": "line1\nline2", "attempt": "3"])
        }
        let lines = output.split(separator: "\n")
        #expect(lines.count == 1)
        let object = try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: String]
        #expect(object?["level"] == "warning")
        #expect(object?["msg"] == "listener \"down\"")
        #expect(object?["error"] == "line1\nline2")
        #expect(object?["time"]?.hasSuffix("Z") == true)
    }

    @Test func textLogLinesQuoteValuesWithSpaces() throws {
        let output = try captured(.text) { logger in
            logger.log(.info, "started", ["listen": "127.0.0.1:8080", "note": "two words"])
        }
        #expect(output.hasSuffix(" info started listen=127.0.0.1:8080 note=\"two words\"\n"))
    }

    @Test func linesBelowTheMinimumLevelAreNotWritten() throws {
        let output = try captured(.text) { logger in
            logger.log(.info, "said")
            logger.log(.warning, "warned")
        }
        #expect(output.contains(" info said\n") && output.contains(" warning warned\n"))
        let quiet = try captured(.text, minimumLevel: .warning) { logger in
            logger.log(.info, "said")
            logger.log(.warning, "warned")
        }
        #expect(!quiet.contains("said") && quiet.contains(" warning warned\n"), "\(quiet)")
    }

    /// Probes are asked every few seconds by every balancer: their lines are `debug`.
    @Test func probeRequestsAreLoggedOnlyAtDebug() async throws {
        let probes = ["/healthz", "/readyz", "/metrics"]
        let info = try await accessLog(.text, paths: probes + ["/nowhere"])
        #expect(
            info.count == 1 && info.first?.contains(" info request method=GET route=- status=404") == true, "\(info)")
        let debug = try await accessLog(.text, paths: probes + ["/nowhere"], level: .debug)
        #expect(debug.count == 4, "\(debug)")
        for (line, probe) in zip(debug, probes) { #expect(line.contains(" debug request method=GET route=\(probe) ")) }
    }

    /// The access-log lines of a one-loop gateway (no database needed) asked `paths` in turn.
    private func accessLog(
        _ format: Logger.Format, paths: [String], level: Logger.Level = .info
    ) async throws -> [String] {
        let pipe = Pipe()
        let logger = Logger(
            format: format, minimumLevel: level, fileDescriptor: pipe.fileHandleForWriting.fileDescriptor)
        try await TestGateway.with(
            databaseURL: "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2", arguments: ["--threads", "1"],
            logger: logger
        ) { _, port in
            for path in paths { _ = try get(path, port: port) }
        }
        try pipe.fileHandleForWriting.close()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        return output.split(separator: "\n").map(String.init).filter {
            $0.contains(" request method=") || $0.contains(#""msg":"request""#)
        }
    }

    static var timestamp: Regex<Substring> { #/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/# }

    @Test func textAccessLogLinesHaveEveryField() async throws {
        let lines = try await accessLog(.text, paths: ["/v1/pull", "/nowhere"])
        try #require(lines.count == 2)
        let fields =
            #/ info request method=GET route=(\S+) status=(\d+) duration_ms=\d+\.\d{3} bytes=[1-9]\d* remote=127\.0\.0\.1:\d+/#
        let pull = try #require(try fields.wholeMatch(in: lines[0].dropFirst(24)))
        #expect(try Self.timestamp.wholeMatch(in: lines[0].prefix(24)) != nil)
        #expect(pull.1 == "/v1/pull" && pull.2 == "401")
        let unmatched = try #require(try fields.wholeMatch(in: lines[1].dropFirst(24)))
        #expect(unmatched.1 == "-" && unmatched.2 == "404")
    }

    @Test func jsonAccessLogLinesHaveEveryField() async throws {
        let lines = try await accessLog(.json, paths: ["/v1/pull", "/nowhere"])
        try #require(lines.count == 2)
        let objects = try lines.map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let pull = try #require(objects[0])
        #expect(try Self.timestamp.wholeMatch(in: pull["time"] as? String ?? "") != nil)
        #expect(pull["level"] as? String == "info")
        #expect(pull["method"] as? String == "GET")
        #expect(pull["route"] as? String == "/v1/pull")
        #expect(pull["status"] as? Int == 401)
        #expect((pull["duration_ms"] as? Double).map { $0 >= 0 } == true)
        #expect((pull["bytes"] as? Int).map { $0 > 0 } == true)
        #expect((pull["remote"] as? String)?.hasPrefix("127.0.0.1:") == true)
        let unmatched = try #require(objects[1])
        #expect(unmatched["route"] is NSNull)
        #expect(unmatched["status"] as? Int == 404)
    }

    @Test func prometheusTextCountsRequestsAndBuckets() {
        let metrics = LoopMetrics()
        metrics.recordRequest(route: "/healthz", status: 200, durationNanoseconds: 300_000)
        metrics.recordRequest(route: "/healthz", status: 200, durationNanoseconds: 20_000_000)
        metrics.recordRequest(route: nil, status: 404, durationNanoseconds: 1_000)
        metrics.connectionOpened()
        var merged = MetricsSnapshot()
        merged.merge(metrics.copy())
        merged.merge(metrics.copy())
        let text = merged.prometheusText(listener: ListenerFigures(isConnected: true))
        #expect(text.contains("ferry_http_requests_total{route=\"/healthz\",status=\"200\"} 4\n"))
        #expect(text.contains("ferry_http_requests_total{route=\"unmatched\",status=\"404\"} 2\n"))
        #expect(text.contains("ferry_http_request_duration_seconds_bucket{route=\"/healthz\",le=\"0.0005\"} 2\n"))
        #expect(text.contains("ferry_http_request_duration_seconds_bucket{route=\"/healthz\",le=\"0.025\"} 4\n"))
        #expect(text.contains("ferry_http_request_duration_seconds_count{route=\"/healthz\"} 4\n"))
        #expect(text.contains("ferry_http_open_connections 2\n"))
        #expect(text.contains("ferry_listener_connected 1\n"))
    }

    @Test func prometheusTextSaysWhereReadsRan() {
        let metrics = LoopMetrics()
        metrics.pullServed(by: .replica)
        metrics.pullServed(by: .replica)
        metrics.pullServed(by: .primary)
        metrics.replicaFallback(.lag)
        var merged = MetricsSnapshot()
        merged.merge(metrics.copy())
        merged.merge(metrics.copy())
        let text = merged.prometheusText(listener: ListenerFigures(isConnected: true))
        #expect(text.contains("ferry_pulls_total{served_by=\"replica\"} 4\n"))
        #expect(text.contains("ferry_pulls_total{served_by=\"primary\"} 2\n"))
        #expect(text.contains("ferry_replica_fallbacks_total{reason=\"lag\"} 2\n"))
        // Every reason is a series from the start, so a rate over it never starts missing.
        #expect(text.contains("ferry_replica_fallbacks_total{reason=\"primary_only\"} 0\n"))
        #expect(text.contains("ferry_replica_fallbacks_total{reason=\"error\"} 0\n"))
    }
}
