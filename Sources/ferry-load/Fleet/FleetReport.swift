import FerryCommandLine
import FerryLoad
import FerryLoop
import Foundation

/// The progress line a second, and the waits between the run's phases.
struct FleetProgress {
    let fleets: [FleetLoop]

    /// Prints a line a second for `seconds`, calling `each` with the elapsed seconds.
    func run(seconds: Double, _ each: (Double) -> Void) {
        let started = MonotonicClock.now()
        while true {
            let elapsed = Double(MonotonicClock.now() - started) / 1e9
            if elapsed >= seconds { break }
            Thread.sleep(forTimeInterval: min(1, seconds - elapsed))
            line()
            each(Double(MonotonicClock.now() - started) / 1e9)
        }
    }

    /// Prints a line a second until `done`, failing after `limit` seconds.
    func wait(upTo limit: Double, what: String, _ done: () -> Bool) throws {
        let started = MonotonicClock.now()
        while !done() {
            guard Double(MonotonicClock.now() - started) / 1e9 < limit else {
                throw LoadError("\(what): not within \(Int(limit)) s")
            }
            Thread.sleep(forTimeInterval: 1)
            line()
        }
    }

    /// `ops/s`, p50/p99 per operation, errors by code, streams open: the last second's.
    func line() {
        var window: [String: [Double]] = [:]
        var errors: [String: Int] = [:]
        var streams = 0
        var devices = 0
        for fleet in fleets {
            let (w, e, s, d) = fleet.loop.runAndWait {
                let taken = fleet.window
                fleet.window = [:]
                return (taken, fleet.errors, fleet.streamsOpen, fleet.devices.count)
            }
            window.merge(w) { $0 + $1 }
            errors.merge(e) { $0 + $1 }
            streams += s
            devices += d
        }
        let total = window.values.reduce(0) { $0 + $1.count }
        var text = "devices \(devices) streams \(streams) ops/s \(total)"
        for (name, values) in window.sorted(by: { $0.key < $1.key }) {
            let p = Percentiles(values)!
            text += " | \(name) \(values.count) p50 \(milliseconds(p.p50)) p99 \(milliseconds(p.p99))"
        }
        if !errors.isEmpty {
            text +=
                " | errors " + errors.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        }
        printLine(text)
    }
}

/// CPU (ms) and resident memory (KiB) of the gateways and of PostgreSQL (the postmaster and its children).
struct ResourceUsage {
    let gateways: [Int32]
    let postmaster: Int32?

    struct Reading {
        var gatewayCPU: [Double] = []
        var gatewayRSS: [Int] = []
        var postgresCPU = 0.0
        var postgresRSS = 0

        static func - (left: Reading, right: Reading) -> Reading {
            Reading(
                gatewayCPU: zip(left.gatewayCPU, right.gatewayCPU).map { $0 - $1 }, gatewayRSS: left.gatewayRSS,
                postgresCPU: left.postgresCPU - right.postgresCPU, postgresRSS: left.postgresRSS)
        }
    }

    func read() -> Reading {
        var reading = Reading()
        for pid in gateways {
            reading.gatewayCPU.append((try? Measurements.cpuTime([pid]).total) ?? 0)
            reading.gatewayRSS.append((try? Measurements.residentKiB([pid])) ?? 0)
        }
        if let postmaster {
            let pids = [postmaster] + Self.children(of: postmaster)
            reading.postgresCPU = (try? Measurements.cpuTime(pids).total) ?? 0
            reading.postgresRSS = pids.compactMap { ProcessStatus.kibibytes("VmRSS", of: $0) }.reduce(0, +)
        }
        return reading
    }

    /// The live child processes of `parent` (a postmaster's: its backends and helpers).
    static func children(of parent: Int32) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { Int32($0) }.filter { self.parent(of: $0) == parent }
    }

    /// The parent process of `pid` (`/proc/<pid>/stat`), nil when there is no such process here.
    static func parent(of pid: Int32) -> Int32? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        return fields.count > 1 ? Int32(fields[1]) : nil
    }
}

/// The convergence check across the fleet: a fresh first load of every user, compared
/// on the user's loop with each of its devices (``ConvergenceCheck``). Every user's load
/// starts at once, so a gateway may refuse some with a retryable answer (its pool's wait
/// queue full: `503 unavailable`); such a page is asked again, as a device would, up to
/// ``maxRetries`` times, and only a final answer or the last refusal is a difference.
enum FleetCheck {
    static let maxRetries = 12

    static func run(_ fleets: [FleetLoop]) throws -> [String] {
        var all: [String] = []
        for fleet in fleets {
            let found = fleet.loop.waitForCallback { (done: @escaping ([String]) -> Void) in
                check(fleet, done)
            }!
            all += found
        }
        return all
    }

    private static func check(_ fleet: FleetLoop, _ done: @escaping ([String]) -> Void) {
        var users: [String: [FleetDevice]] = [:]
        for device in fleet.devices.values where device.phase == .frozen && !device.userID.isEmpty {
            users[device.userID, default: []].append(device)
        }
        var differences: [String] = []
        var remaining = users.count
        if remaining == 0 { return done([]) }
        for (userID, devices) in users {
            let loader = devices[0]
            var fresh = FreshLoad()
            func page(_ cursor: String?, retries: Int = 0) {
                let path = "/v1/pull" + (cursor.map { "?cursor=\(FleetDevice.escape($0))" } ?? "")
                loader.http.send("GET", path, token: loader.token) { outcome in
                    if outcome.isRetryable, retries < maxRetries {
                        let delay = HTTPClientOutcome.retryDelay(
                            retries: retries + 1, jitterMilliseconds: UInt64.random(in: 0..<250))
                        fleet.loop.schedule(after: delay) { page(cursor, retries: retries + 1) }
                        return
                    }
                    guard case .answered(200, let body) = outcome,
                        let answer = try? PullAnswer(body, tables: fleet.tables)
                    else {
                        differences.append("user \(userID): the fresh first load failed: \(outcome)")
                        return finished()
                    }
                    fresh.add(answer, userID: userID)
                    if answer.hasMore { return page(answer.cursor) }
                    differences += ConvergenceCheck.differences(
                        userID: userID, fresh: fresh,
                        devices: devices.map { ($0.tag, $0.replica, $0.outbox.writes) })
                    finished()
                }
            }
            func finished() {
                remaining -= 1
                if remaining == 0 { done(differences) }
            }
            page(nil)
        }
    }
}

/// The end-of-run figures: the table printed and the JSON report.
struct FleetReport {
    let mix: FleetMix
    let scenario: String
    let urls: [String]
    let loadSeconds: Double
    let steadySeconds: Double
    let usage: ResourceUsage.Reading
    let differences: [String]
    let samples: [String: [Double]]
    let errors: [String: Int]
    let devices: Int
    let users: Int
    let failedDevices: Int
    let mutations: Int
    let webSocketDevices: Int

    init(
        mix: FleetMix, scenario: String, urls: [String], fleets: [FleetLoop], loadSeconds: Double,
        steadySeconds: Double, usage: ResourceUsage.Reading, differences: [String]
    ) {
        self.mix = mix
        self.scenario = scenario
        self.urls = urls
        self.loadSeconds = loadSeconds
        self.steadySeconds = steadySeconds
        self.usage = usage
        self.differences = differences
        var samples: [String: [Double]] = [:]
        var errors: [String: Int] = [:]
        var devices = 0
        var users = Set<String>()
        var failed = 0
        var mutations = 0
        var webSockets = 0
        for fleet in fleets {
            let snapshot = fleet.loop.runAndWait {
                (
                    fleet.samples, fleet.errors, fleet.devices.count, Set(fleet.devices.values.map(\.userID)),
                    fleet.devices.values.filter { $0.phase == .failed }.count,
                    fleet.devices.values.filter { $0.transport == .webSocket }.count, fleet.mutations
                )
            }
            samples.merge(snapshot.0) { $0 + $1 }
            errors.merge(snapshot.1) { $0 + $1 }
            devices += snapshot.2
            users.formUnion(snapshot.3)
            failed += snapshot.4
            webSockets += snapshot.5
            mutations += snapshot.6
        }
        self.samples = samples
        self.errors = errors
        self.devices = devices
        self.users = users.count
        failedDevices = failed
        self.mutations = mutations
        webSocketDevices = webSockets
    }

    func printTable() {
        func cell(_ text: String, _ width: Int) -> String {
            String(repeating: " ", count: max(0, width - text.count)) + text
        }
        printLine(
            "operation".padding(toLength: 16, withPad: " ", startingAt: 0)
                + ["count", "per_s", "p50_ms", "p99_ms", "max_ms"].map { cell($0, 10) }.joined())
        for (name, values) in samples.sorted(by: { $0.key < $1.key }) {
            let p = Percentiles(values)!
            let rate = Double(p.count) / max(loadSeconds + steadySeconds, 0.001)
            printLine(
                name.padding(toLength: 16, withPad: " ", startingAt: 0) + cell("\(p.count)", 10)
                    + [rate, p.p50, p.p99, p.max].map { cell(String(format: "%.1f", $0), 10) }.joined())
        }
        printLine("devices \(devices) users \(users) websocket \(webSocketDevices) failed \(failedDevices)")
        printLine(
            "mutations \(mutations) mutations_per_second \(Int(Double(mutations) / max(loadSeconds + steadySeconds, 0.001)))"
        )
        printLine(
            "load_seconds \(String(format: "%.1f", loadSeconds)) steady_seconds \(String(format: "%.1f", steadySeconds))"
        )
        for (index, cpu) in usage.gatewayCPU.enumerated() {
            printLine("gateway_\(index) cpu_ms \(Int(cpu)) rss_kib \(usage.gatewayRSS[index])")
        }
        printLine("postgres cpu_ms \(Int(usage.postgresCPU)) rss_kib \(usage.postgresRSS)")
        for (key, count) in errors.sorted(by: { $0.key < $1.key }) { printLine("error \(key) \(count)") }
        printLine("differences \(differences.count)")
    }

    func json() throws -> Data {
        var operations: [String: Any] = [:]
        for (name, values) in samples {
            let p = Percentiles(values)!
            operations[name] = ["count": p.count, "p50_ms": p.p50, "p99_ms": p.p99, "max_ms": p.max]
        }
        let object: [String: Any] = [
            "scenario": scenario, "urls": urls,
            "mix": try JSONSerialization.jsonObject(with: JSONEncoder().encode(mix)),
            "devices": devices, "users": users, "websocket_devices": webSocketDevices, "failed_devices": failedDevices,
            "load_seconds": loadSeconds, "steady_seconds": steadySeconds, "mutations": mutations,
            "operations": operations, "errors": errors,
            "gateways": usage.gatewayCPU.indices.map {
                ["cpu_ms": usage.gatewayCPU[$0], "rss_kib": usage.gatewayRSS[$0]]
            },
            "postgres": ["cpu_ms": usage.postgresCPU, "rss_kib": usage.postgresRSS],
            "differences": Array(differences.prefix(1000)), "converged": differences.isEmpty && failedDevices == 0,
        ]
        return try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys])
    }
}
