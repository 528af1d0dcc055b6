import FerryCommandLine
import FerryLoad
import FerryLoop
import FerryPostgres
import Foundation

/// The measurements of bench/realtime.sh (idle, latency, broadcast) and
/// bench/stream-churn.sh (churn), each a command, and what they share. Each prints
/// `name value` lines.
enum Measurements {
    // MARK: - Idle streams

    /// `ferry-load idle`: opens N streams, waits `--settle-seconds`, and reports the servers' resident
    /// memory per stream (and that they are all still open).
    enum Idle: Command {
        static let name = "idle"
        static let summary = "open N idle streams; the servers' resident memory per stream"
        static let usage = "ferry-load idle --url U --tokens FILE --streams N --server-pids P[,P...] [stream options]"
        static let settings =
            [LoadSettings.url, LoadSettings.tokens, LoadSettings.streams, LoadSettings.serverPIDs]
            + LoadSettings.streamOptions

        static func run(_ values: SettingValues) throws -> Int32 {
            let count = try values.integer("streams", in: 0...10_000_000)!
            let servers = try serverPIDs(values)
            let transport = values.string("transport")!
            printLine("idle_streams \(count)")
            printLine("idle_transport \(transport)")
            let before = try residentKiB(servers)
            let fleet = try StreamFleet(values: values, count: count)
            defer { fleet.stop() }
            try reportOpening(fleet)
            Thread.sleep(forTimeInterval: try values.number("settle-seconds", in: 0...3600)!)
            let after = try residentKiB(servers)
            let open = try fleet.openNow()
            printLine("streams_open_after_settle \(open)")
            reportMemory(before: before, after: after, streams: open)
            guard open == count else { throw LoadError("\(count - open) of \(count) streams did not stay open") }
            return ExitStatus.success
        }
    }

    // MARK: - Stream churn

    /// `ferry-load churn`: opens N streams, lets every client hang up once all said hello, and does it again,
    /// `--rounds` times (`--pause-seconds` apart); reports the servers' resident memory after
    /// each round and what it grew by per stream lifecycle after the first round, which
    /// warms the allocator and the servers' token caches. The same N users every round.
    enum Churn: Command {
        static let name = "churn"
        static let summary = "open N streams, hang up, again: the servers' memory growth per stream lifecycle"
        static let usage = """
            ferry-load churn --url U --tokens FILE --streams N --server-pids P[,P...] [--rounds 40]
                             [--pause-seconds 0] [stream options]
            """
        static let settings =
            [
                LoadSettings.url, LoadSettings.tokens, LoadSettings.streams, LoadSettings.serverPIDs,
                Setting("rounds", default: "40", help: "rounds of opening and hanging up (at least 2)"),
                Setting("pause-seconds", default: "0", help: "pause after each round"),
            ] + LoadSettings.streamOptions

        static func run(_ values: SettingValues) throws -> Int32 {
            let count = try values.integer("streams", in: 0...10_000_000)!
            let rounds = max(2, try values.integer("rounds", in: 0...100_000)!)
            let pause = try values.number("pause-seconds", in: 0...3600)!
            let servers = try serverPIDs(values)
            printLine("churn_streams \(count)")
            printLine("churn_transport \(values.string("transport")!)")
            printLine("churn_rounds \(rounds)")
            let before = try residentKiB(servers)
            var warmed = before
            var last = before
            for round in 1...rounds {
                let fleet = try StreamFleet(values: values, count: count)
                let opened = fleet.opened
                // Each worker closes its streams' sockets and exits.
                fleet.stop()
                guard opened == count else {
                    throw LoadError("round \(round): only \(opened) of \(count) streams opened")
                }
                if pause > 0 { Thread.sleep(forTimeInterval: pause) }
                last = try residentKiB(servers)
                printLine("churn_round \(round) server_rss_kib \(last)")
                if round == 1 { warmed = last }
            }
            printLine("server_rss_before_kib \(before)")
            printLine("server_rss_after_first_round_kib \(warmed)")
            printLine("server_rss_after_kib \(last)")
            let lifecycles = Double(count * (rounds - 1))
            printLine("server_bytes_per_stream_lifecycle \(Int((Double(last - warmed) * 1024 / lifecycles).rounded()))")
            return ExitStatus.success
        }
    }

    // MARK: - Cue latency

    /// `ferry-load latency`: while N streams are open, commits a change for a random user among them at a
    /// steady rate; reports commit → cue at the client and commit → NOTIFY at a bare
    /// `LISTEN` connection (the floor), and the difference.
    ///
    /// "Commit" is when the writer sends its one-statement (autocommit) transaction:
    /// both latencies start from that instant, so the statement's own time cancels out
    /// of the difference.
    enum Latency: Command {
        static let name = "latency"
        static let summary = "commit -> cue latency for random users among the N, and a bare LISTEN as the floor"
        static let usage = """
            ferry-load latency --url U --tokens FILE --streams N --database-url DB [--table bench_items]
                               [--rate 200] [--seconds 20] [--write upsert|notify] [stream options]
            """
        static let settings =
            [
                LoadSettings.url, LoadSettings.tokens, LoadSettings.streams, LoadSettings.databaseURL,
                Setting("table", default: "bench_items", help: "the table written (id text, user_id uuid, n int)"),
                Setting("rate", default: "200", help: "statements a second"),
                Setting("seconds", default: "20", help: "how long the writer writes"),
                Setting("quiet-ms", default: "1000", help: "a user is written again only after this long"),
                Setting("write", default: "upsert", help: "upsert (through the cue triggers) or notify (by hand)"),
                Setting("server-pids", help: LoadSettings.serverPIDs.help, isOptional: true),
            ] + LoadSettings.streamOptions

        static func run(_ values: SettingValues) throws -> Int32 {
            let count = try values.integer("streams", in: 0...10_000_000)!
            let table = values.string("table")!
            let rate = try values.number("rate", in: 0.001...1_000_000)!
            let seconds = try values.number("seconds", in: 0.001...1_000_000)!
            let quiet = UInt64(try values.integer("quiet-ms", in: 0...3_600_000)!)
            let mode = values.string("write")!
            let configuration = try PostgresConfiguration(values.string("database-url")!, applicationName: "ferry-load")
            let sql: String
            switch mode {
            case "upsert":
                sql =
                    "insert into \(table) (id, user_id, n) values ($1::text, cast($1::text as uuid), 1) "
                    + "on conflict (id) do update set n = \(table).n + 1"
            case "notify":
                // The harness without cue triggers: the NOTIFY a trigger would send, by hand.
                sql = "select pg_notify('ferry_cue', $1 || ' - \(table)')"
            default:
                throw SettingsError("invalid --write: \(mode) (expected upsert or notify)")
            }
            // The writer picks among the users whose streams are open (every user of the
            // file when no stream is, to time the floor alone).
            let tokens = try readTokens(values.string("tokens")!)
            let users = (count > 0 ? tokens.prefix(count) : tokens[...]).map(\.userID)
            guard users.count >= max(count, 1) else { throw LoadError("the token file has fewer than \(count) users") }
            printLine("latency_streams \(count)")
            printLine("latency_transport \(values.string("transport")!)")
            let servers = try optionalServerPIDs(values)
            let fleet = try openStreams(values, count: count, servers: servers, recordArrivals: true)
            defer { fleet.stop() }

            let floor = try CueFloor.start(configuration)
            defer { floor.stop() }
            let writer = try Writer.start(configuration)
            defer { writer.stop() }
            let run = writer.run(sql: sql, rate: rate, seconds: seconds, users: users, quietMilliseconds: quiet)
            if let error = run.firstError { throw LoadError("\(run.errors) writes failed, first: \(error)") }
            // Cues still on their way.
            Thread.sleep(forTimeInterval: 2)

            let index = Dictionary(
                users.enumerated().map { ($0.element, $0.offset) }, uniquingKeysWith: { first, _ in first })
            let floorArrivals = floor.received().compactMap { notification in
                index[String(notification.owner)].map { CueLatency.Event(user: $0, at: notification.at) }
            }
            let ferry = count > 0 ? CueLatency.match(writes: run.writes, arrivals: try fleet.arrivals()) : []
            let bare = CueLatency.match(writes: run.writes, arrivals: floorArrivals)
            printLine("writes \(run.writes.count)")
            printLine("writes_late \(run.late)")
            report("writer_round_trip_ms", Percentiles(run.roundTrips))
            report("floor_ms", Percentiles(bare.compactMap { $0 }))
            printLine("floor_missing \(bare.filter { $0 == nil }.count)")
            guard count > 0 else { return ExitStatus.success }
            report("ferry_cue_ms", Percentiles(ferry.compactMap { $0 }))
            printLine("ferry_cue_missing \(ferry.filter { $0 == nil }.count)")
            if let cue = Percentiles(ferry.compactMap { $0 }), let floor = Percentiles(bare.compactMap { $0 }) {
                printLine("ferry_added_ms_p50 \(milliseconds(cue.p50 - floor.p50))")
                printLine("ferry_added_ms_p99 \(milliseconds(cue.p99 - floor.p99))")
            }
            // The same difference write by write, where both arrived.
            let paired = zip(ferry, bare).compactMap { cue, floor in cue.flatMap { c in floor.map { c - $0 } } }
            report("ferry_minus_floor_per_write_ms", Percentiles(paired))
            return ExitStatus.success
        }
    }

    // MARK: - Broadcast

    /// `ferry-load broadcast`: with N streams open, one statement on a `shared` table per round: time from the
    /// commit (statement sent) to the last stream's cue, and to the floor's NOTIFY.
    enum Broadcast: Command {
        static let name = "broadcast"
        static let summary = "one statement on a shared table: commit -> the last stream's cue"
        static let usage = """
            ferry-load broadcast --url U --tokens FILE --streams N --database-url DB [--table bench_news]
                                 [--rounds 5] [stream options]
            """
        static let settings =
            [
                LoadSettings.url, LoadSettings.tokens, LoadSettings.streams, LoadSettings.databaseURL,
                Setting("table", default: "bench_news", help: "the shared table written (id, body)"),
                Setting("rounds", default: "5", help: "statements, a second apart"),
                Setting("cue-timeout-seconds", default: "10", help: "how long a round waits for every stream's cue"),
                Setting("server-pids", help: LoadSettings.serverPIDs.help, isOptional: true),
            ] + LoadSettings.streamOptions

        static func run(_ values: SettingValues) throws -> Int32 {
            let count = try values.integer("streams", in: 0...10_000_000)!
            let table = values.string("table")!
            let rounds = max(1, try values.integer("rounds", in: 0...100_000)!)
            let timeout = try values.number("cue-timeout-seconds", in: 0.001...3600)!
            let configuration = try PostgresConfiguration(values.string("database-url")!, applicationName: "ferry-load")
            printLine("broadcast_streams \(count)")
            printLine("broadcast_transport \(values.string("transport")!)")
            let servers = try optionalServerPIDs(values)
            let fleet = try openStreams(values, count: count, servers: servers)
            defer { fleet.stop() }
            let floor = try CueFloor.start(configuration)
            defer { floor.stop() }
            let writer = try Writer.start(configuration)
            defer { writer.stop() }

            var lasts: [Double] = []
            var serverCPU = CPUTime()
            var clientsCPU = CPUTime()
            var machine = Array(repeating: ProcessorTime(), count: try processorTimes().count)
            for round in 1...rounds {
                let expected = try fleet.openNow()
                let serverBefore = try servers.map(cpuTime) ?? CPUTime()
                let clientsBefore = try cpuTime(fleet.pids)
                let machineBefore = try processorTimes()
                let (sent, answered) = try writer.commit(
                    "insert into \(table) (id, body) values (1, $1) on conflict (id) do update set body = excluded.body",
                    ["round \(round) at \(MonotonicClock.now())"])
                var cued = (count: 0, latest: UInt64(0))
                let deadline = sent + UInt64(timeout * 1e9)
                while MonotonicClock.now() < deadline {
                    cued = try fleet.cued(since: sent)
                    if cued.count >= expected { break }
                    Thread.sleep(forTimeInterval: 0.02)
                }
                let floorAt = floor.received().first { $0.owner == "*" && $0.at >= sent }?.at
                // CPU the round cost (the polling above adds a little to the clients'):
                // server and clients share this machine's cores.
                let serverRound = (try servers.map(cpuTime) ?? CPUTime()) - serverBefore
                let clientsRound = try cpuTime(fleet.pids) - clientsBefore
                let machineRound = zip(try processorTimes(), machineBefore).map { $0 - $1 }
                serverCPU = serverCPU + serverRound
                clientsCPU = clientsCPU + clientsRound
                machine = zip(machine, machineRound).map { $0 + $1 }
                let last = cued.count > 0 ? Double(cued.latest - sent) / 1e6 : .infinity
                let floorText = floorAt.map { milliseconds(Double($0 - sent) / 1e6) } ?? "none"
                let statement = milliseconds(Double(answered - sent) / 1e6)
                printLine(
                    "broadcast_round \(round) cued \(cued.count)/\(expected) last_ms \(milliseconds(last)) "
                        + "floor_ms \(floorText) statement_ms \(statement) "
                        + "cpu_ms server \(serverRound) clients \(clientsRound) "
                        + machineRound.enumerated().map { "cpu\($0.offset) \($0.element)" }.joined(separator: " "))
                lasts.append(cued.count >= expected ? last : .infinity)
                Thread.sleep(forTimeInterval: 1)
            }
            let sorted = lasts.sorted()
            printLine("broadcast_last_ms_median \(milliseconds(sorted[(sorted.count - 1) / 2]))")
            printLine("broadcast_last_ms_max \(milliseconds(sorted[sorted.count - 1]))")
            let perRound = Double(rounds)
            if servers != nil {
                printLine("broadcast_server_cpu_ms_per_round \(Int(serverCPU.total / perRound))")
                printLine("broadcast_server_system_cpu_ms_per_round \(Int(serverCPU.system / perRound))")
            }
            printLine("broadcast_client_cpu_ms_per_round \(Int(clientsCPU.total / perRound))")
            printLine("broadcast_client_system_cpu_ms_per_round \(Int(clientsCPU.system / perRound))")
            // Each processor's time, whoever used it (other work on the machine too): the
            // receive processing a softirq does on an idle processor is in no process's figures.
            for (index, time) in machine.enumerated() {
                printLine("broadcast_cpu\(index)_user_ms_per_round \(Int(time.user / perRound))")
                printLine("broadcast_cpu\(index)_system_ms_per_round \(Int(time.system / perRound))")
                printLine("broadcast_cpu\(index)_softirq_ms_per_round \(Int(time.softirq / perRound))")
                printLine("broadcast_cpu\(index)_idle_ms_per_round \(Int(time.idle / perRound))")
            }
            return ExitStatus.success
        }
    }

    // MARK: - Shared figures

    /// Opens `count` streams and reports how that went; with `servers`, also their
    /// memory per stream after `--settle-seconds` (latency and broadcast).
    static func openStreams(
        _ values: SettingValues, count: Int, servers: [Int32]?, recordArrivals: Bool = false
    ) throws -> StreamFleet {
        let before = try servers.map(residentKiB)
        let fleet = try StreamFleet(values: values, count: count, recordArrivals: recordArrivals)
        do {
            try reportOpening(fleet)
            if let servers, let before {
                Thread.sleep(forTimeInterval: try values.number("settle-seconds", in: 0...3600)!)
                reportMemory(before: before, after: try residentKiB(servers), streams: try fleet.openNow())
            }
            return fleet
        } catch {
            fleet.stop()
            throw error
        }
    }

    static func reportOpening(_ fleet: StreamFleet) throws {
        printLine("streams_opened \(fleet.opened)")
        printLine("stream_workers \(fleet.workers.count)")
        printLine("open_seconds \(String(format: "%.2f", fleet.openSeconds))")
        guard fleet.opened == fleet.requested else {
            throw LoadError("only \(fleet.opened) of \(fleet.requested) streams opened")
        }
    }

    static func report(_ name: String, _ percentiles: Percentiles?) {
        guard let percentiles else { return printLine("\(name)_count 0") }
        printLine("\(name)_count \(percentiles.count)")
        printLine("\(name)_p50 \(milliseconds(percentiles.p50))")
        printLine("\(name)_p99 \(milliseconds(percentiles.p99))")
        printLine("\(name)_max \(milliseconds(percentiles.max))")
    }

    static func reportMemory(before: Int, after: Int, streams: Int) {
        printLine("server_rss_before_kib \(before)")
        printLine("server_rss_after_kib \(after)")
        let perStream = streams > 0 ? Double(after - before) * 1024 / Double(streams) : 0
        printLine("server_bytes_per_stream \(Int(perStream.rounded()))")
    }

    static func optionalServerPIDs(_ values: SettingValues) throws -> [Int32]? {
        try values.string("server-pids").map { _ in try serverPIDs(values) }
    }

    static func serverPIDs(_ values: SettingValues) throws -> [Int32] {
        let pids = values.string("server-pids")!.split(separator: ",").compactMap { Int32($0) }
        guard !pids.isEmpty else { throw SettingsError("invalid --server-pids: expected process ids, comma-separated") }
        return pids
    }

    /// CPU time in milliseconds, user and system (the kernel counts it in clock ticks,
    /// usually 10 ms).
    struct CPUTime: CustomStringConvertible {
        var user = 0.0
        var system = 0.0
        var total: Double { user + system }
        var description: String { "\(Int(total)) (system \(Int(system)))" }

        static func - (left: CPUTime, right: CPUTime) -> CPUTime {
            CPUTime(user: left.user - right.user, system: left.system - right.system)
        }

        static func + (left: CPUTime, right: CPUTime) -> CPUTime {
            CPUTime(user: left.user + right.user, system: left.system + right.system)
        }
    }

    /// The summed CPU time of `pids` (`/proc/<pid>/stat`).
    static func cpuTime(_ pids: [Int32]) throws -> CPUTime {
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        var time = CPUTime()
        for pid in pids {
            let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
            // Fields after the command name, which is in parentheses and may hold spaces.
            guard let close = stat.lastIndex(of: ")") else { throw LoadError("unreadable /proc/\(pid)/stat") }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
            guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else {
                throw LoadError("unreadable /proc/\(pid)/stat")
            }
            time.user += user * 1000 / ticksPerSecond
            time.system += system * 1000 / ticksPerSecond
        }
        return time
    }

    /// The summed time the threads of `pids` ran, in milliseconds to the nanosecond (each
    /// `/proc/<pid>/task/<thread>/schedstat`'s first field): the storm's figures are tens of
    /// milliseconds over dozens of processes, where ``cpuTime(_:)``'s clock ticks would round
    /// each process by up to 10 ms. A thread that ended is not counted.
    static func runMilliseconds(_ pids: [Int32]) throws -> Double {
        var total = 0.0
        for pid in pids {
            for thread in try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") {
                guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/schedstat", encoding: .utf8)
                else { continue }
                guard let first = text.split(separator: " ").first, let nanoseconds = Double(first) else {
                    throw LoadError("unreadable /proc/\(pid)/task/\(thread)/schedstat")
                }
                total += nanoseconds / 1e6
            }
        }
        return total
    }

    /// One processor's time in milliseconds, from its `cpuN` line of `/proc/stat`: user
    /// (with nice), system, softirq (with hard irq; without CONFIG_IRQ_TIME_ACCOUNTING a
    /// softirq tick is also in the interrupted process's system time), idle (with iowait).
    struct ProcessorTime: CustomStringConvertible {
        var user = 0.0
        var system = 0.0
        var softirq = 0.0
        var idle = 0.0
        var description: String {
            "user \(Int(user)) system \(Int(system)) softirq \(Int(softirq)) idle \(Int(idle))"
        }

        static func - (left: ProcessorTime, right: ProcessorTime) -> ProcessorTime {
            ProcessorTime(
                user: left.user - right.user, system: left.system - right.system,
                softirq: left.softirq - right.softirq, idle: left.idle - right.idle)
        }

        static func + (left: ProcessorTime, right: ProcessorTime) -> ProcessorTime {
            ProcessorTime(
                user: left.user + right.user, system: left.system + right.system,
                softirq: left.softirq + right.softirq, idle: left.idle + right.idle)
        }
    }

    /// Every processor's time so far (`/proc/stat`), in processor order.
    static func processorTimes() throws -> [ProcessorTime] {
        let millisecondsPerTick = 1000 / Double(sysconf(Int32(_SC_CLK_TCK)))
        let stat = try String(contentsOfFile: "/proc/stat", encoding: .utf8)
        return stat.split(separator: "\n").filter { $0.hasPrefix("cpu") && !$0.hasPrefix("cpu ") }.map { line in
            // cpuN user nice system idle iowait irq softirq ...
            let ticks = line.split(separator: " ").dropFirst().map { (Double($0) ?? 0) * millisecondsPerTick }
            guard ticks.count >= 7 else { return ProcessorTime() }
            return ProcessorTime(
                user: ticks[0] + ticks[1], system: ticks[2], softirq: ticks[5] + ticks[6], idle: ticks[3] + ticks[4])
        }
    }

    /// The summed `VmRSS` of `pids`, in KiB.
    static func residentKiB(_ pids: [Int32]) throws -> Int {
        try pids.map { pid in
            guard let kib = ProcessStatus.kibibytes("VmRSS", of: pid) else {
                throw LoadError("no VmRSS for process \(pid)")
            }
            return kib
        }.reduce(0, +)
    }
}
