import FerryTestSupport
import Foundation
import Testing

/// `ferry-load fleet` against real gateways on a real database: a small fleet passes the
/// convergence check, and so does one whose gateway goes away under load.
@Suite struct FleetIntegrationTests {
    /// Limits a load test needs lifted (anonymous sign-ups from one address, sign-ins of one account).
    static let gatewayArguments = [
        "--anonymous-signups-per-hour", "1000000000", "--signins-per-account-per-hour", "1000000000",
        "--failed-signins-per-hour", "1000000000", "--password-hashes-per-address", "64",
    ]

    /// A busy mix for seconds-long runs: every device pushes, reconnects and links often.
    static func writeMix() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("fleet-mix-\(UUID().uuidString).json")
            .path
        let mix = """
            {"app": "puzzle", "signUpsPerSecond": 400, "pushesPerDeviceMinute": 60, "linkedShare": 0.05,
             "reconnectsPerDeviceHour": 600, "reconnectJitterMilliseconds": 300, "signOutsPerDeviceHour": 600,
             "lockHeartbeatSeconds": 1}
            """
        try mix.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Runs the built `ferry-load` with `arguments`; its output once it exited.
    static func startLoad(_ arguments: [String]) throws -> (ChildProcess, String) {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("fleet-\(UUID().uuidString).log").path
        let child = try ChildProcess(
            try TestRepository.executable("ferry-load").path, arguments, environment: ["PATH": "/usr/bin:/bin"],
            output: log, errors: log)
        return (child, log)
    }

    static func finish(_ child: ChildProcess, _ log: String) async throws -> (Int32?, String) {
        let ending = try await offload { child.wait() }
        let output = try String(contentsOfFile: log, encoding: .utf8)
        try? FileManager.default.removeItem(atPath: log)
        return (ending.exitStatus, output)
    }

    @Test func smallFleetConverges() async throws {
        let mix = try Self.writeMix()
        defer { try? FileManager.default.removeItem(atPath: mix) }
        try await MigratedDatabase.with(examples: ["puzzle"]) { database in
            try await TestGateway.with(databaseURL: database.gatewayURL, arguments: Self.gatewayArguments) { _, port in
                let (child, log) = try Self.startLoad([
                    "fleet", "--urls", "http://127.0.0.1:\(port)", "--mix", mix, "--devices", "200", "--seconds", "4",
                    "--loops", "2",
                ])
                let (status, output) = try await Self.finish(child, log)
                #expect(status == 0, "\(output.suffix(4000))")
                #expect(output.contains("convergence ok"), "\(output.suffix(4000))")
                #expect(output.contains("push "), "no pushes answered: \(output.suffix(2000))")
            }
        }
    }

    @Test func fleetConvergesWhenOneOfTwoGatewaysGoesAway() async throws {
        let mix = try Self.writeMix()
        defer { try? FileManager.default.removeItem(atPath: mix) }
        try await MigratedDatabase.with(examples: ["puzzle"]) { database in
            let first = TestGateway(databaseURL: database.gatewayURL, arguments: Self.gatewayArguments)
            let firstPort = try await first.start()
            try await TestGateway.with(databaseURL: database.gatewayURL, arguments: Self.gatewayArguments) {
                _, secondPort in
                let (child, log) = try Self.startLoad([
                    "fleet", "--urls", "http://127.0.0.1:\(firstPort),http://127.0.0.1:\(secondPort)", "--mix", mix,
                    "--devices", "150", "--seconds", "8", "--scenario", "reconnect-storm",
                ])
                // Under load (sign-ups take under a second at this pace), the first gateway shuts down.
                try await Task.sleep(for: .seconds(4))
                await first.stop()
                let (status, output) = try await Self.finish(child, log)
                #expect(status == 0, "\(output.suffix(4000))")
                #expect(output.contains("convergence ok"), "\(output.suffix(4000))")
                #expect(output.contains("stream_recovery"), "no stream came back: \(output.suffix(2000))")
            }
            await first.stop()
        }
    }
}
