import FerryTestSupport
import Foundation
import Glibc
import Testing

/// `deploy/failover-drill.sh` (docs/HA.md), shortened to one round of each kind: a Patroni
/// cluster (three etcd members, two PostgreSQL nodes in synchronous mode) behind haproxy,
/// two gateways on it, writers and streams, then a switchover and a `kill -9` of the
/// primary. Every acknowledged push must be in the database exactly once, and every stream
/// cued after the writes came back. Needs root (the drill runs its servers as `postgres`)
/// and Debian's patroni, etcd-server and haproxy (`make deps`); about a minute.
@Suite(.hangLimit, .tags(.process), .tagSelection) struct FailoverDrillTests {
    /// Where the drill's ports start: 60 of them, next to this checkout's development
    /// PostgreSQL (`FERRY_DEV_PG_PORT`, one per checkout) so that checkouts do not collide.
    static var basePort: Int {
        let development = ProcessInfo.processInfo.environment["FERRY_DEV_PG_PORT"].flatMap { Int($0) }
        return development.map { $0 + 100 } ?? 25_500
    }

    @Test func aSwitchoverAndAKilledPrimaryLoseNoAcknowledgedPushAndApplyNoneTwice() async throws {
        try #require(getuid() == 0, "the drill runs PostgreSQL, Patroni and etcd as postgres: run the tests as root")
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-drill-\(UUID().uuidString).log")
        defer { try? FileManager.default.removeItem(at: log) }
        var environment = ProcessInfo.processInfo.environment
        environment["FERRY_BIN"] = try TestRepository.ferryExecutable().path
        environment["DRILL_BASE_PORT"] = String(Self.basePort)
        environment["DRILL_DEVICES"] = "2"
        let drill = try ChildProcess(
            "/bin/bash", [TestRepository.root + "/deploy/failover-drill.sh", "1"], environment: environment,
            output: log.path, errors: log.path)
        // Bounded: past 4 minutes it is stopped with TERM, so that its trap stops every
        // server. Waited for off the test threads: it takes a minute.
        let ended = try await offload {
            if !eventuallyHoldsBlocking(seconds: 240, { !drill.isRunning }) {
                kill(-drill.pid, SIGTERM)
                _ = eventuallyHoldsBlocking(seconds: 30) { !drill.isRunning }
            }
            return drill.wait(seconds: 5).ending
        }
        let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        #expect(ended == .exited(0), "the drill failed:\n\(output)")
        for kind in ["switchover", "kill"] {
            #expect(output.contains("\(kind): 1 rounds"), "no \(kind) round:\n\(output)")
        }
        // The summary's lines, one of each per kind.
        let summary = output.components(separatedBy: "\n").filter { $0.hasPrefix("  ") }
        let losses = summary.filter { $0.contains("acknowledged pushes") }
        #expect(losses.count == 2 && losses.allSatisfy { $0.hasSuffix("lost 0, applied twice 0") }, "\(output)")
        let streams = summary.filter { $0.contains("streams cued after") }
        #expect(streams.count == 2 && streams.allSatisfy { $0.hasSuffix(" 2 of 2") }, "\(output)")
    }
}
