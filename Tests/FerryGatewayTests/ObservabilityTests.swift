import FerryGateway
import Foundation
import Testing

@Suite struct ObservabilityTests {
    /// Runs `body` with a logger writing into a pipe and returns what it wrote.
    private func captured(_ format: GatewayConfiguration.LogFormat, _ body: (Logger) -> Void) throws -> String {
        let pipe = Pipe()
        let logger = Logger(format: format, fileDescriptor: pipe.fileHandleForWriting.fileDescriptor)
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
}
