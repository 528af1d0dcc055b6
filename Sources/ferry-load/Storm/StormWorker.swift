import FerryCommandLine
import FerryLoad
import FerryLoop
import Foundation

/// `ferry-load storm-devices`: one worker process holding a share of `ferry-load storm`'s
/// devices (``StormDevice``; a process holds as many as its open-file limit allows, two
/// descriptors a device). The coordinator reads its lines:
///
///     failure <count> <reason>         (for each reason devices failed to become ready)
///     ready <ok> <failed> <seconds>    once every device pulled after its hello, or failed
///
/// then sends commands on standard input, one per line:
///
///     expect <table> <column> <value> <rows> <indices|*>   ->  expecting
///         (from now on, devices of the comma-separated indices, or every device, wait
///         for `rows` rows of `table` whose `column` is `value` in their pull answers)
///     status     ->  status <devices that have it> <devices pulling or due> <ready devices> <pulls since expect>
///     arrivals   ->  arrival <device index> <monotonic ns> ... then `end`
///     errors     ->  error <count> <key> ... then `end` (failed devices: `device:<reason>`)
///     quit (or end of input): close everything and exit
enum StormWorker: Command {
    static let name = "storm-devices"
    static let summary = "(a worker `storm` starts; reads commands on standard input)"
    static let usage = "ferry-load storm-devices --urls U[,U…] --tokens FILE --first I --count N [options]"
    static let settings = [
        Setting("urls", help: "the gateways, comma-separated; device i uses gateway i mod their number"),
        LoadSettings.tokens,
        Setting("first", default: "0", help: "the first line of the token file this worker's devices use"),
        Setting("count", help: "devices this worker holds"),
        Setting("websocket-share", default: "0.5", help: "the share of devices on WebSocket (the rest: SSE)"),
        Setting("loops", default: "1", help: "event loops"),
        Setting("concurrency", default: "256", help: "devices opening (stream and first pull) at once per loop"),
        Setting(
            "devices-per-source", default: "2000",
            help: "devices per source address (two ports each; the kernel slows past half its port range)"),
        Setting("source-base", help: "the first source address (default: the kernel's choice)", isOptional: true),
        Setting("ready-timeout", default: "600", help: "seconds every device has to become ready or fail"),
    ]

    static func run(_ values: SettingValues) throws -> Int32 {
        let servers = try values.string("urls")!.split(separator: ",").map { url in
            let text = try serverAddress(String(url))
            return try SocketAddress(host: text.host, port: text.port)
        }
        let tokens = try readTokens(values.string("tokens")!)
        let first = try values.integer("first", in: 0...10_000_000)!
        let count = try values.integer("count", in: 0...10_000_000)!
        guard first + count <= tokens.count else {
            throw LoadError("devices \(first)..<\(first + count) but the token file has \(tokens.count) lines")
        }
        let webSocketShare = try values.number("websocket-share", in: 0...1)!
        let loopCount = try values.integer("loops", in: 1...64)!
        let concurrency = try values.integer("concurrency", in: 1...1_000_000)!
        let perSource = try values.integer("devices-per-source", in: 1...10_000_000)!
        let sourceBase = try values.string("source-base").map(StreamsWorker.ipv4)
        let readyTimeout = Double(try values.integer("ready-timeout", in: 1...86_400)!)

        var shares: [[(index: Int, token: String)]] = Array(repeating: [], count: loopCount)
        for index in first..<(first + count) { shares[index % loopCount].append((index, tokens[index].token)) }
        let loops = (0..<loopCount).map {
            StormLoop(
                loop: EventLoop.spawn(name: "storm-\($0)"), servers: servers, sourceBase: sourceBase,
                devicesPerSource: perSource, maximumOpening: concurrency)
        }
        defer { stop(loops) }
        let started = MonotonicClock.now()
        let settled = DispatchSemaphore(value: 0)
        for (storm, share) in zip(loops, shares) {
            storm.loop.execute {
                storm.onSettled = { settled.signal() }
                storm.start(share, webSocketShare: webSocketShare)
            }
        }
        let deadline = DispatchTime.now() + readyTimeout
        for _ in loops where settled.wait(timeout: deadline) == .timedOut {
            printError("ferry-load storm-devices: not every device ready or failed within \(Int(readyTimeout)) s")
            break
        }
        let seconds = Double(MonotonicClock.now() - started) / 1e9
        var ready = 0
        var failures: [String: Int] = [:]
        for storm in loops {
            let (status, failed) = storm.loop.runAndWait { (storm.status, storm.failures) }
            ready += status.ready
            failures.merge(failed, uniquingKeysWith: +)
        }
        for (reason, number) in failures.sorted(by: { $0.value > $1.value }) {
            printLine("failure \(number) \(reason)")
        }
        printLine("ready \(ready) \(count - ready) \(String(format: "%.2f", seconds))")

        while let line = readLine() {
            let words = line.split(separator: " ").map(String.init)
            switch words.first {
            case "expect" where words.count == 6:
                guard let rows = Int(words[4]) else {
                    printLine("error invalid expect")
                    continue
                }
                let change = ExpectedChange(table: words[1], column: words[2], value: words[3], rows: rows)
                let indices = words[5] == "*" ? nil : Set(words[5].split(separator: ",").compactMap { Int($0) })
                for storm in loops { storm.loop.runAndWait { storm.expect(change, indices: indices) } }
                printLine("expecting")
            case "status":
                var total = (got: 0, busy: 0, ready: 0, pulls: 0)
                for storm in loops {
                    let (status, pulls) = storm.loop.runAndWait { (storm.status, storm.pulls) }
                    total = (
                        total.got + status.got, total.busy + status.busy, total.ready + status.ready,
                        total.pulls + pulls
                    )
                }
                printLine("status \(total.got) \(total.busy) \(total.ready) \(total.pulls)")
            case "arrivals":
                var text = ""
                for storm in loops {
                    for arrival in storm.loop.runAndWait({ storm.arrivals }) {
                        text += "arrival \(arrival.index) \(arrival.at)\n"
                    }
                }
                FileHandle.standardOutput.write(Data((text + "end\n").utf8))
            case "errors":
                var counts: [String: Int] = [:]
                for storm in loops {
                    let (errors, failed) = storm.loop.runAndWait { (storm.allErrors, storm.failures) }
                    counts.merge(errors, uniquingKeysWith: +)
                    for (reason, number) in failed { counts["device:\(reason)", default: 0] += number }
                }
                var text = ""
                for (key, number) in counts.sorted(by: { $0.key < $1.key }) {
                    text += "error \(number) \(key.replacingOccurrences(of: " ", with: "_"))\n"
                }
                FileHandle.standardOutput.write(Data((text + "end\n").utf8))
            case "quit":
                return ExitStatus.success
            default:
                printLine("error unknown command")
            }
        }
        return ExitStatus.success
    }

    /// Closes every stream and connection, then stops the loops (the devices outlive their callbacks).
    private static func stop(_ loops: [StormLoop]) {
        for storm in loops { storm.loop.runAndWait { storm.closeEverything() } }
        for storm in loops { storm.loop.stop() }
        for storm in loops { storm.loop.waitUntilStopped() }
        withExtendedLifetime(loops) {}
    }
}
