import FerryCommandLine
import FerryLoad
import FerryLoop
import FerryPostgres
import Foundation

/// `ferry-load storm`: the shared-change storm (issue 19 §2; bench/README.md, "ferry-load
/// storm"). Devices held by worker processes (``StormWorker``) each have a stream, a
/// keep-alive connection and a cursor; per round, first the limit (ordinary pulls: a few
/// devices' own rows changed, each of them pulls), then the storm (one upsert of a `shared`
/// table's row, every device pulls): from the statement's answer to each device's pull
/// answer holding the row, and the CPU PostgreSQL and the gateways spent meanwhile.
enum StormCommand: Command {
    static let name = "storm"
    static let summary = "one shared-table write to N streaming devices: commit -> every device's pull has the row"
    static let usage = """
        ferry-load storm --urls U[,U…] --devices N --database-url DB [--tokens FILE] [--rounds 3]
                         [--table bench_news] [--own-table bench_items] [--ordinary-pulls 100]
                         [--postgres-pid P] [--server-pids P[,P…]]
        """
    static let settings = [
        Setting("urls", help: "the gateways, http://<numeric host>:<port>, comma-separated; devices spread over them"),
        Setting("devices", help: "devices (streams, connections, cursors)"),
        LoadSettings.databaseURL,
        Setting(
            "tokens", help: "a `ferry-load signup` token file, a line per device (default: sign up here)",
            isOptional: true),
        Setting("rounds", default: "3", help: "rounds: the ordinary pulls, then the storm"),
        Setting("table", default: "bench_news", help: "the shared table written (id int primary key, body text)"),
        Setting(
            "own-table", default: "bench_items",
            help: "the devices' own table for the ordinary pulls (id text primary key, user_id uuid, n int; lww)"),
        Setting("ordinary-pulls", default: "100", help: "devices whose own rows change for the limit (spread)"),
        Setting("ordinary-rows", default: "10", help: "rows changed per such device"),
        Setting("websocket-share", default: "0.5", help: "the share of devices on WebSocket (the rest: SSE)"),
        Setting(
            "postgres-pid",
            help: "the postmaster's process id (CPU of it and its children; default: the writer's backend's parent)",
            isOptional: true),
        Setting("server-pids", help: LoadSettings.serverPIDs.help, isOptional: true),
        Setting(
            "devices-per-process",
            help: "devices per worker process (default: what the open-file limit allows, two descriptors each)",
            isOptional: true),
        Setting("loops-per-process", default: "1", help: "event loops per worker process"),
        Setting("concurrency", default: "256", help: "devices opening (stream and first pull) at once per loop"),
        Setting("source-base", help: "the first source address, 127.A.B.1 (default: random)", isOptional: true),
        Setting(
            "devices-per-source", default: "2000",
            help: "devices per source address (two ports each; the kernel slows past half its port range)"),
        Setting("ready-timeout", default: "600", help: "seconds every device has to open and pull once"),
        Setting("round-timeout", default: "120", help: "seconds a round's devices have to pull the change"),
        Setting("pause-seconds", default: "2", help: "quiet seconds before each measurement"),
    ]

    static func run(_ values: SettingValues) throws -> Int32 {
        let urls = values.string("urls")!.split(separator: ",").map(String.init)
        let servers = try urls.map(serverAddress)
        let count = try values.integer("devices", in: 1...1_000_000)!
        let rounds = try values.integer("rounds", in: 1...1000)!
        let table = values.string("table")!
        let ownTable = values.string("own-table")!
        let ordinaryCount = min(count, try values.integer("ordinary-pulls", in: 1...100_000)!)
        let ordinaryRows = try values.integer("ordinary-rows", in: 1...10_000)!
        let postmaster = try values.integer("postgres-pid", in: 1...Int(Int32.max)).map { Int32($0) }
        let gatewayPIDs = try values.string("server-pids").map(FleetCommand.parsePIDs) ?? []
        let roundTimeout = Double(try values.integer("round-timeout", in: 1...86_400)!)
        let pause = try values.number("pause-seconds", in: 0...3600)!
        let configuration = try PostgresConfiguration(values.string("database-url")!, applicationName: "ferry-load")

        try waitUntilReady(servers, timeout: 30)
        var temporaryTokens: String?
        defer { temporaryTokens.map { try? FileManager.default.removeItem(atPath: $0) } }
        let tokenPath: String
        if let path = values.string("tokens") {
            tokenPath = path
        } else {
            tokenPath =
                FileManager.default.temporaryDirectory.appendingPathComponent(
                    "ferry-load-storm-\(UUID().uuidString).tsv"
                ).path
            temporaryTokens = tokenPath
            try signUp(count, at: servers[0], into: tokenPath)
        }
        let users = try readTokens(tokenPath).map(\.userID)
        guard users.count >= count else { throw LoadError("\(tokenPath) has \(users.count) users, not \(count)") }

        printLine("storm_devices \(count)")
        printLine("storm_gateways \(urls.count)")
        let writer = try Writer.start(configuration)
        defer { writer.stop() }
        let writerPID = writer.backendPID
        let workers = try StormWorkers(values: values, tokens: tokenPath, count: count)
        defer { workers.stop() }
        printLine("storm_workers \(workers.workers.count)")
        printLine("ready_seconds \(String(format: "%.2f", workers.readySeconds))")
        guard workers.ready == count else {
            try workers.printErrors()
            throw LoadError("only \(workers.ready) of \(count) devices became ready")
        }
        // The postmaster: as given, else the parent of the writer's backend when it runs on this machine.
        let postgres = postmaster ?? ResourceUsage.parent(of: writerPID)
        if postgres == nil {
            printLine("postgres_cpu unmeasured (no --postgres-pid, the database is not on this machine)")
        }
        let usage = StormUsage(postmaster: postgres, gateways: gatewayPIDs, clients: workers.pids, writer: writerPID)

        // The ordinary pulls' devices, spread over the workers and gateways.
        let ordinary = (0..<ordinaryCount).map { $0 * count / ordinaryCount }
        let runTag = String(UUID().uuidString.prefix(8)).lowercased()
        var stormRounds: [StormRound] = []
        var ordinaryRounds: [StormRound] = []
        var timedOut = false
        for round in 1...rounds {
            Thread.sleep(forTimeInterval: pause)
            // The limit: each of `ordinary`'s users gets `ordinaryRows` rows of its own changed in one statement.
            let n = Int.random(in: 1...1_000_000_000)
            let ordinaryRound = try workers.measure(
                ExpectedChange(table: ownTable, column: "n", value: String(n), rows: ordinaryRows),
                devices: ordinary, usage: usage, timeout: roundTimeout
            ) {
                try writer.commit(
                    "insert into \(ownTable) (id, user_id, n) select u || '-' || k, u::uuid, $2::int "
                        + "from unnest($1::text[]) u, generate_series(1, $3::int) k "
                        + "on conflict (id) do update set n = excluded.n",
                    ["{" + ordinary.map { users[$0] }.joined(separator: ",") + "}", String(n), String(ordinaryRows)])
            }
            printLine("ordinary_round \(round) \(ordinaryRound.line)")
            ordinaryRounds.append(ordinaryRound)
            Thread.sleep(forTimeInterval: pause)
            // The storm: one upsert of the shared table's row 1, which every device must pull.
            let body = "storm-\(runTag)-\(round)"
            let stormRound = try workers.measure(
                ExpectedChange(table: table, column: "body", value: body, rows: 1), devices: nil, usage: usage,
                timeout: roundTimeout
            ) {
                try writer.commit(
                    "insert into \(table) (id, body) values (1, $1) on conflict (id) do update set body = excluded.body",
                    [body])
            }
            printLine("storm_round \(round) \(stormRound.line)")
            stormRounds.append(stormRound)
            if ordinaryRound.timedOut || stormRound.timedOut {
                timedOut = true
                break
            }
        }
        try workers.printErrors()
        report(storm: stormRounds, ordinary: ordinaryRounds, devices: count, ordinaryDevices: ordinaryCount)
        guard !timedOut else {
            printLine("storm FAILED: a round's devices did not all pull the change within \(Int(roundTimeout)) s")
            return ExitStatus.failure
        }
        return ExitStatus.success
    }

    /// The summary lines: medians over the rounds (the worst where it says so).
    static func report(storm: [StormRound], ordinary: [StormRound], devices: Int, ordinaryDevices: Int) {
        func median(_ values: [Double]) -> Double { Percentiles(values)?.p50 ?? .nan }
        printLine("storm_rounds \(storm.count)")
        printLine("storm_devices_with_row \(storm.map(\.got).min() ?? 0)")
        printLine("storm_device_ms_p50 \(milliseconds(median(storm.map(\.p50))))")
        printLine("storm_device_ms_p99 \(milliseconds(median(storm.map(\.p99))))")
        printLine("storm_last_device_ms \(milliseconds(median(storm.map(\.last))))")
        printLine("storm_last_device_ms_worst \(milliseconds(storm.map(\.last).max() ?? .nan))")
        let stormPostgres = median(storm.map(\.postgresCPU))
        printLine("storm_postgres_cpu_ms \(milliseconds(stormPostgres))")
        printLine("storm_postgres_cpu_us_per_device \(Int((stormPostgres * 1000 / Double(devices)).rounded()))")
        printLine("storm_writer_postgres_cpu_ms \(milliseconds(median(storm.map(\.writerCPU))))")
        printLine("storm_gateway_cpu_ms \(milliseconds(median(storm.map(\.gatewayCPU))))")
        printLine("storm_client_cpu_ms \(milliseconds(median(storm.map(\.clientCPU))))")
        printLine("storm_pulls \(Int(median(storm.map { Double($0.pulls) })))")
        printLine("ordinary_pulls \(ordinaryDevices)")
        printLine("ordinary_pulls_served \(Int(median(ordinary.map { Double($0.pulls) })))")
        printLine("ordinary_last_device_ms \(milliseconds(median(ordinary.map(\.last))))")
        // Scaled to 100 devices' pulls when fewer were asked for (a small test fleet).
        let ordinary100 = median(ordinary.map(\.postgresCPU)) * 100 / Double(ordinaryDevices)
        printLine("ordinary_pulls_100_postgres_cpu_ms \(milliseconds(ordinary100))")
        printLine("ordinary_writer_postgres_cpu_ms \(milliseconds(median(ordinary.map(\.writerCPU))))")
        printLine(
            "storm_to_ordinary_pulls_100_postgres_cpu_ratio \(String(format: "%.2f", stormPostgres / ordinary100))")
    }

    /// Waits until every gateway answers `GET /readyz` with `200` (its listener is connected:
    /// a cue notified before that never reaches a stream), failing after `timeout` seconds.
    static func waitUntilReady(_ servers: [SocketAddressText], timeout: Double) throws {
        let loop = EventLoop.spawn(name: "storm-ready")
        defer {
            loop.stop()
            loop.waitUntilStopped()
        }
        let deadline = MonotonicClock.now() + UInt64(timeout * 1e9)
        for server in servers {
            let address = try SocketAddress(host: server.host, port: server.port)
            while true {
                let outcome = loop.waitForCallback { (done: @escaping (HTTPClientOutcome) -> Void) in
                    let http = HTTPClientConnection(loop: loop, server: address, source: nil)
                    http.send("GET", "/readyz", token: nil) { outcome in
                        http.close()
                        done(outcome)
                    }
                }!
                if case .answered(200, _) = outcome { break }
                guard MonotonicClock.now() < deadline else {
                    throw LoadError("http://\(server.host):\(server.port)/readyz: not ready within \(Int(timeout)) s")
                }
                Thread.sleep(forTimeInterval: 0.1)
            }
        }
    }

    /// Signs up `count` anonymous users at `server` into a token file.
    static func signUp(_ count: Int, at server: SocketAddressText, into path: String) throws {
        let loop = EventLoop.spawn(name: "storm-signup")
        defer {
            loop.stop()
            loop.waitUntilStopped()
        }
        let address = try SocketAddress(host: server.host, port: server.port)
        let (users, failure) = loop.waitForCallback { (done: @escaping (([SignedUpUser], String?)) -> Void) in
            let signUps = AnonymousSignUps(loop: loop, server: address, count: count, connections: 32)
            signUps.run { done((signUps.users, signUps.failure)) }
        }!
        if let failure { throw LoadError("sign-up: \(failure)") }
        try users.map { "\($0.userID)\t\($0.accessToken)\n" }.joined().write(
            toFile: path, atomically: true, encoding: .utf8)
    }
}

/// What one measured change cost, and how long its devices took to pull it.
struct StormRound {
    var expected = 0
    var got = 0
    var p50 = Double.nan
    var p99 = Double.nan
    var last = Double.nan
    var postgresCPU = 0.0
    var writerCPU = 0.0
    var gatewayCPU = 0.0
    var clientCPU = 0.0
    var pulls = 0
    var statement = 0.0
    var timedOut = false

    var line: String {
        "devices_with_change \(got)/\(expected) p50_ms \(milliseconds(p50)) p99_ms \(milliseconds(p99)) "
            + "last_ms \(milliseconds(last)) postgres_cpu_ms \(milliseconds(postgresCPU)) "
            + "writer_cpu_ms \(milliseconds(writerCPU)) gateway_cpu_ms \(milliseconds(gatewayCPU)) "
            + "client_cpu_ms \(milliseconds(clientCPU)) pulls \(pulls) statement_ms \(milliseconds(statement))"
            + (timedOut ? " TIMED_OUT" : "")
    }
}

/// CPU time (ms, to the nanosecond) of PostgreSQL (the postmaster and its children but the
/// writer's backend), the writer's backend, the gateways and the device workers.
struct StormUsage {
    let postmaster: Int32?
    let gateways: [Int32]
    let clients: [Int32]
    let writer: Int32

    struct Reading {
        var postgres: [Int32: Double] = [:]
        var writer = 0.0
        var gateways = 0.0
        var clients = 0.0
    }

    func read() throws -> Reading {
        var reading = Reading()
        if let postmaster {
            for pid in [postmaster] + ResourceUsage.children(of: postmaster) where pid != writer {
                // A backend that exited between listing and reading counts for nothing.
                reading.postgres[pid] = try? Measurements.runMilliseconds([pid])
            }
            reading.writer = (try? Measurements.runMilliseconds([writer])) ?? 0
        }
        reading.gateways = try Measurements.runMilliseconds(gateways)
        reading.clients = try Measurements.runMilliseconds(clients)
        return reading
    }

    /// `after - before`, PostgreSQL process by process (one that started meanwhile from zero).
    static func spent(_ before: Reading, _ after: Reading, into round: inout StormRound) {
        round.postgresCPU = after.postgres.reduce(0) { $0 + $1.value - (before.postgres[$1.key] ?? 0) }
        round.writerCPU = after.writer - before.writer
        round.gatewayCPU = after.gateways - before.gateways
        round.clientCPU = after.clients - before.clients
    }
}

/// The coordinator's view of the ``StormWorker`` processes that hold the devices.
final class StormWorkers {
    private(set) var workers: [StreamFleet.Worker] = []
    /// Devices ready (stream open, pulled once).
    private(set) var ready = 0
    /// Seconds until every worker reported.
    private(set) var readySeconds = 0.0

    /// Starts enough workers for `count` devices (the first `count` lines of `tokens`) and
    /// waits until each reports (each bounds its wait by `--ready-timeout`).
    init(values: SettingValues, tokens: String, count: Int) throws {
        let perProcess =
            try values.integer("devices-per-process", in: 1...10_000_000) ?? max(50, (FerryLoadCLI.fileLimit - 256) / 2)
        let processes = max(1, (count + perProcess - 1) / perProcess)
        let base = values.string("source-base") ?? "127.\(Int.random(in: 16...250)).\(Int.random(in: 0...255)).1"
        let forwarded = [
            "--urls", values.string("urls")!, "--tokens", tokens,
            "--websocket-share", values.string("websocket-share")!, "--loops", values.string("loops-per-process")!,
            "--concurrency", values.string("concurrency")!, "--devices-per-source",
            values.string("devices-per-source")!, "--source-base", base,
            "--ready-timeout", values.string("ready-timeout")!,
        ]
        let started = MonotonicClock.now()
        var first = 0
        for process in 0..<processes {
            let share = count / processes + (process < count % processes ? 1 : 0)
            workers.append(
                try StreamFleet.Worker(
                    arguments: ["storm-devices", "--first", String(first), "--count", String(share)] + forwarded))
            first += share
        }
        var failures: [String: Int] = [:]
        for worker in workers {
            while true {
                guard let line = worker.readLine() else { throw LoadError("a storm worker exited while opening") }
                let words = line.split(separator: " ", maxSplits: 2)
                if words.first == "failure", words.count == 3 {
                    failures[String(words[2]), default: 0] += Int(words[1]) ?? 0
                } else if words.first == "ready", words.count > 1 {
                    ready += Int(words[1]) ?? 0
                    break
                }
            }
        }
        readySeconds = Double(MonotonicClock.now() - started) / 1e9
        for (reason, number) in failures.sorted(by: { $0.value > $1.value }) {
            printLine("device_failures \(number) \(reason)")
        }
    }

    /// The worker processes' ids.
    var pids: [Int32] { workers.map(\.pid) }

    /// Sets `change` as what `devices` (nil: every one) wait for, runs `write`, and waits until
    /// each of them has pulled it and no device has a pull in flight or due (the whole storm),
    /// or `timeout` seconds after the write answered.
    func measure(
        _ change: ExpectedChange, devices: [Int]?, usage: StormUsage, timeout: Double,
        write: () throws -> (sent: UInt64, answered: UInt64)
    ) throws -> StormRound {
        let indices = devices.map { $0.map(String.init).joined(separator: ",") } ?? "*"
        for worker in workers {
            guard
                try worker.ask("expect \(change.table) \(change.column) \(change.value) \(change.rows) \(indices)")
                    == "expecting"
            else { throw LoadError("a storm worker did not take the expectation") }
        }
        var round = StormRound()
        var status = try self.status()
        round.expected = devices?.count ?? status.ready
        let before = try usage.read()
        let (sent, answered) = try write()
        round.statement = Double(answered - sent) / 1e6
        let deadline = answered + UInt64(timeout * 1e9)
        while true {
            status = try self.status()
            if status.got >= round.expected && status.busy == 0 { break }
            if MonotonicClock.now() >= deadline {
                round.timedOut = true
                break
            }
            Thread.sleep(forTimeInterval: 0.005)
        }
        let after = try usage.read()
        StormUsage.spent(before, after, into: &round)
        round.got = status.got
        round.pulls = status.pulls
        let delays = try arrivals().map { Double(Int64(bitPattern: $0 &- answered)) / 1e6 }
        if let percentiles = Percentiles(delays) {
            round.p50 = percentiles.p50
            round.p99 = percentiles.p99
            round.last = percentiles.max
        }
        return round
    }

    /// Every worker's `status`, summed.
    func status() throws -> (got: Int, busy: Int, ready: Int, pulls: Int) {
        var total = (got: 0, busy: 0, ready: 0, pulls: 0)
        for worker in workers {
            let words = try worker.ask("status").split(separator: " ").compactMap { Int($0) }
            guard words.count == 4 else { throw LoadError("a storm worker answered `status` oddly") }
            total = (total.got + words[0], total.busy + words[1], total.ready + words[2], total.pulls + words[3])
        }
        return total
    }

    /// When each device that has the expected change read it (monotonic ns).
    func arrivals() throws -> [UInt64] {
        var times: [UInt64] = []
        for worker in workers {
            worker.send("arrivals")
            while true {
                guard let line = worker.readLine() else { throw LoadError("a storm worker exited") }
                if line == "end" { break }
                let words = line.split(separator: " ")
                if words.count == 3, let at = UInt64(words[2]) { times.append(at) }
            }
        }
        return times
    }

    /// Prints `pull_errors <count> <key>` for every error the devices met (none: nothing).
    func printErrors() throws {
        var counts: [String: Int] = [:]
        for worker in workers {
            worker.send("errors")
            while true {
                guard let line = worker.readLine() else { throw LoadError("a storm worker exited") }
                if line == "end" { break }
                let words = line.split(separator: " ", maxSplits: 2)
                if words.count == 3 { counts[String(words[2]), default: 0] += Int(words[1]) ?? 0 }
            }
        }
        for (key, number) in counts.sorted(by: { $0.key < $1.key }) { printLine("pull_errors \(number) \(key)") }
    }

    /// Closes every device and waits for the workers to exit.
    func stop() {
        for worker in workers { worker.send("quit") }
        for worker in workers { worker.wait() }
        workers = []
    }
}
