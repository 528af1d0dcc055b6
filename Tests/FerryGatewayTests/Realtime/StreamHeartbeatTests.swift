import FerryTestSupport
import Foundation
import Testing

/// PROTOCOL.md "Streams": a heartbeat every `heartbeat_ms`, on SSE a `: ping` comment
/// (docs/PROTOCOL.md, "SSE framing"; `FERRY_STREAM_HEARTBEAT_MS`).
@Suite(.hangLimit, .tags(.database), .tagSelection) struct StreamHeartbeatTests {
    /// Three `: ping` comments come, each exactly `: ping` and a blank line, and never
    /// sooner than `heartbeat_ms` after the one before: the third no sooner than three
    /// heartbeats after the stream was asked for (a lower bound, which a slow machine
    /// only makes later). A stream that never pinged, or pinged at the default 25 s,
    /// would fail on the 10 s read timeout.
    @Test func anSSEStreamSendsAPingCommentEveryHeartbeat() async throws {
        let heartbeat = 300
        try await withAccountsGateway(arguments: ["--stream-heartbeat-ms", String(heartbeat)]) { harness in
            let session = try await harness.signUpAnonymous()
            let asked = ContinuousClock.now
            let stream = try await harness.openStream(session, .serverSentEvents, timeout: 10)
            let hello = try await stream.nextMessageAsync(ofType: "hello")
            #expect(hello.int("heartbeat_ms") == heartbeat, "\(hello)")
            var pings = 0
            for _ in 0..<20 where pings < 3 {
                let block = String(
                    decoding: try await offload { try stream.socket.readThrough(Array("\n\n".utf8)) }, as: UTF8.self)
                if block == ": ping\n\n" {
                    pings += 1
                } else if !block.hasPrefix("event: cue\n") {
                    // A cue may come (the listener's first connection); nothing else may.
                    Issue.record("not a heartbeat: \(block)")
                }
            }
            let elapsed = ContinuousClock.now - asked
            #expect(pings == 3)
            #expect(elapsed >= .milliseconds(3 * heartbeat), "three heartbeats in \(elapsed)")
            stream.close()
        }
    }
}
