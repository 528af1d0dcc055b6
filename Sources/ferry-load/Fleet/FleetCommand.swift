import FerryCommandLine
import FerryLoad
import FerryLoop
import Foundation

/// `ferry-load fleet`: the hosted-backend load test (bench/README.md, "ferry-load fleet").
enum FleetCommand: Command {
    static let name = "fleet"
    static let summary = "a fleet of simulated devices doing everything at once, then a convergence check"
    static let usage = "ferry-load fleet --urls U[,U…] [--mix FILE] [--devices N] [--seconds S] [--report FILE]"
    static let settings = [
        Setting("urls", help: "the gateways (or haproxy), http://<numeric host>:<port>, comma-separated"),
        Setting("mix", help: "the mix file (JSON); default: the puzzle app's mix", isOptional: true),
        Setting("app", help: "the default mix of this app when --mix is absent: puzzle or tasks", isOptional: true),
        Setting("devices", help: "devices that sign up (overrides the mix's)", isOptional: true),
        Setting("seconds", default: "30", help: "seconds of steady load after every device has loaded"),
        Setting("loops", default: "1", help: "event loops the devices are spread over"),
        Setting(
            "scenario", default: "steady",
            help: "steady, reconnect-storm, signup-burst (shared storms: ferry-load storm)"),
        Setting("report", help: "the JSON report to write", isOptional: true),
        Setting("server-pids", help: "the gateways' process ids, comma-separated (CPU and RSS)", isOptional: true),
        Setting(
            "postgres-pid", help: "the postmaster's process id (CPU and RSS of it and its children)", isOptional: true),
        Setting(
            "storm-after", default: "10", help: "reconnect-storm: seconds into the steady phase to run --storm-command"),
        Setting(
            "storm-command", help: "reconnect-storm: a shell command that kills or restarts a gateway", isOptional: true
        ),
        Setting("load-timeout", default: "300", help: "seconds every device has to sign up and load"),
    ]

    static func run(_ values: SettingValues) throws -> Int32 {
        let urls = values.string("urls")!.split(separator: ",").map(String.init)
        let servers = try urls.map { url -> SocketAddress in
            let text = try serverAddress(url)
            return try SocketAddress(host: text.host, port: text.port)
        }
        var mix: FleetMix
        if let path = values.string("mix") {
            mix = try FleetMix(json: Data(contentsOf: URL(fileURLWithPath: path)))
        } else {
            let app = values.string("app") ?? "puzzle"
            guard let defaults = FleetMix.defaults(for: app) else { throw LoadError("unknown --app \(app)") }
            mix = defaults
        }
        if let devices = try values.integer("devices", in: 0...1_000_000) { mix.devices = devices }
        let scenario = values.string("scenario")!
        switch scenario {
        case "steady", "reconnect-storm": break
        case "signup-burst": mix.signUpsPerSecond *= 10
        case "shared-storm": throw LoadError("the shared-change storm (issue 19 §2) is ferry-load storm")
        default: throw LoadError("unknown --scenario \(scenario)")
        }
        try mix.validate()
        // Two descriptors a device (its connection and its stream), companions included.
        let descriptors = Int(Double(mix.devices) * (1 + mix.linkedShare) * 2) + 256
        guard descriptors <= FerryLoadCLI.fileLimit else {
            throw LoadError(
                "\(mix.devices) devices need about \(descriptors) descriptors, the open-file limit is "
                    + "\(FerryLoadCLI.fileLimit): raise it (ulimit -Hn) or run several ferry-load fleet processes")
        }
        let seconds = try values.integer("seconds", in: 0...86_400)!
        let loopCount = try values.integer("loops", in: 1...64)!
        let loadTimeout = try values.integer("load-timeout", in: 1...86_400)!
        let gatewayPIDs = try values.string("server-pids").map(parsePIDs) ?? []
        let postmaster = try values.integer("postgres-pid", in: 1...Int(Int32.max)).map { Int32($0) }
        let stormAfter = try values.integer("storm-after", in: 0...86_400)!

        let tables = try fetchSchema(servers[0])
        let runTag = String(UUID().uuidString.prefix(8)).lowercased()
        let sourceBase = (UInt8.random(in: 100...200), UInt8.random(in: 0...200))
        let loops = (0..<loopCount).map { EventLoop.spawn(name: "fleet-\($0)") }
        let fleets = loops.enumerated().map { number, loop in
            FleetLoop(
                loop: loop, servers: servers, mix: mix, tables: tables, runTag: runTag,
                devices: Array(stride(from: number, to: mix.devices, by: loopCount)),
                companionStart: mix.devices + number, companionStride: loopCount,
                signUpsPerSecond: mix.signUpsPerSecond / Double(loopCount), sourceBase: sourceBase)
        }
        // The loops stop before the fleets go: a timer still due must not find its device's
        // loop gone (a release build ends `fleets`' lifetime at its last use, not here).
        defer {
            withExtendedLifetime(fleets) {
                for loop in loops {
                    loop.stop()
                    loop.waitUntilStopped()
                }
            }
        }
        let progress = FleetProgress(fleets: fleets)
        let usage = ResourceUsage(gateways: gatewayPIDs, postmaster: postmaster)
        let before = usage.read()
        let runStarted = MonotonicClock.now()
        for fleet in fleets { fleet.loop.execute { fleet.start() } }

        printLine("fleet: \(mix.devices) devices of the \(mix.app) mix on \(urls.joined(separator: ",")), \(scenario)")
        try progress.wait(upTo: Double(loadTimeout), what: "every device loaded") {
            fleets.allSatisfy { fleet in
                fleet.loop.runAndWait { fleet.allLoaded }
            }
        }
        let loadSeconds = Double(MonotonicClock.now() - runStarted) / 1e9
        let steadyStarted = MonotonicClock.now()
        var stormAt: UInt64?
        progress.run(seconds: Double(seconds)) { elapsed in
            if scenario == "reconnect-storm", stormAt == nil, elapsed >= Double(stormAfter),
                let command = values.string("storm-command")
            {
                printLine("storm: \(command)")
                stormAt = MonotonicClock.now()
                _ = shell(command)
            }
        }
        let steadySeconds = Double(MonotonicClock.now() - steadyStarted) / 1e9
        let during = usage.read()

        // The end: stop writing, let every request finish, pull once more, then check.
        for fleet in fleets { fleet.loop.runAndWait { fleet.stopAll() } }
        try progress.wait(upTo: 120, what: "requests drained") { allIdle(fleets) }
        for fleet in fleets { fleet.loop.runAndWait { fleet.finalPulls() } }
        try progress.wait(upTo: 120, what: "final pulls") { allIdle(fleets) }
        for fleet in fleets { fleet.loop.runAndWait { fleet.freeze() } }
        try progress.wait(upTo: 120, what: "pulls cued by the final pulls' neighbours") { allIdle(fleets) }
        let differences = try FleetCheck.run(fleets)
        for fleet in fleets { fleet.loop.runAndWait { fleet.closeEverything() } }

        let report = FleetReport(
            mix: mix, scenario: scenario, urls: urls, fleets: fleets, loadSeconds: loadSeconds,
            steadySeconds: steadySeconds, usage: during - before, differences: differences)
        report.printTable()
        if let path = values.string("report") { try report.json().write(to: URL(fileURLWithPath: path)) }
        guard differences.isEmpty && report.failedDevices == 0 else {
            for difference in differences.prefix(100) { printLine("DIFFERENCE \(difference)") }
            if differences.count > 100 { printLine("… \(differences.count - 100) more differences") }
            for fleet in fleets {
                for failure in fleet.loop.runAndWait({ fleet.failures }) { printLine("FAILED \(failure)") }
            }
            printLine("convergence FAILED: \(differences.count) differences, \(report.failedDevices) devices failed")
            return ExitStatus.failure
        }
        printLine("convergence ok: \(report.devices) devices, \(report.users) users")
        return ExitStatus.success
    }

    static func allIdle(_ fleets: [FleetLoop]) -> Bool {
        fleets.allSatisfy { fleet in fleet.loop.runAndWait { fleet.allIdle } }
    }

    static func parsePIDs(_ text: String) throws -> [Int32] {
        try text.split(separator: ",").map {
            guard let pid = Int32($0) else { throw LoadError("invalid process id \($0)") }
            return pid
        }
    }

    /// The tables the gateway syncs, read with a throwaway anonymous account.
    static func fetchSchema(_ server: SocketAddress) throws -> [String: SyncedTable] {
        let loop = EventLoop.spawn(name: "fleet-schema")
        defer {
            loop.stop()
            loop.waitUntilStopped()
        }
        let result = loop.waitForCallback { (done: @escaping (Result<[String: SyncedTable], LoadError>) -> Void) in
            let http = HTTPClientConnection(loop: loop, server: server, source: nil)
            http.send("POST", "/v1/auth/anonymous", token: nil, body: "{\"device_id\":\"\(UUID().uuidString)\"}") {
                outcome in
                guard case .answered(201, let body) = outcome, let user = SignedUpUser(signUpAnswer: body) else {
                    return done(.failure(LoadError("sign-up for the schema failed: \(outcome)")))
                }
                http.send("GET", "/v1/schema", token: user.accessToken) { outcome in
                    http.close()
                    guard case .answered(200, let body) = outcome, let tables = try? SyncedTable.parseSchema(body)
                    else { return done(.failure(LoadError("GET /v1/schema failed: \(outcome)"))) }
                    done(.success(tables))
                }
            }
        }!
        return try result.get()
    }

    @discardableResult
    static func shell(_ command: String) -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        guard (try? process.run()) != nil else { return -1 }
        process.waitUntilExit()
        return process.terminationStatus
    }
}
