import FerryCommandLine
import FerryLoad
import FerryLoop
import Foundation

/// `ferry-load streams`: one worker process holding a share of the streams (a process
/// can hold only as many as its open-file limit). The coordinator reads its lines:
///
///     failure <count> <reason>          (for each reason streams failed to open)
///     opened <ok> <failed> <seconds>    once every stream opened or failed
///
/// then sends commands on standard input, one per line, each answered with one line:
///
///     cued <since ns>   ->  cued <streams whose latest cue is at or after since> <latest ns>
///     open              ->  open <streams open now>
///     arrivals          ->  arrival <stream index> <ns> ... then `end`
///     quit (or end of input): close every stream and exit
enum StreamsWorker: Command {
    static let name = "streams"
    static let summary = "(a worker the commands above start; reads commands on standard input)"
    static let usage = "ferry-load streams --url U --tokens FILE --first I --count N [options]"
    static let settings = [
        LoadSettings.url, LoadSettings.tokens,
        Setting("first", default: "0", help: "the first line of the token file this worker opens"),
        Setting("count", help: "streams this worker opens"),
        Setting("transport", default: "websocket", help: "websocket or sse"),
        Setting("loops", default: "1", help: "event loops"),
        Setting("concurrency", default: "256", help: "handshakes in flight per loop"),
        Setting("streams-per-source", default: "20000", help: "streams per source address"),
        Setting("source-base", help: "the first source address (default: the kernel's choice)", isOptional: true),
        Setting("open-timeout", default: "300", help: "seconds every stream has to open or fail"),
        Setting("record-arrivals", help: "keep every cue's arrival (for `arrivals`)", isSwitch: true),
    ]

    static func run(_ values: SettingValues) throws -> Int32 {
        let server = try serverAddress(values.string("url")!)
        let tokens = try readTokens(values.string("tokens")!)
        let first = try values.integer("first", in: 0...10_000_000)!
        let count = try values.integer("count", in: 0...10_000_000)!
        guard first + count <= tokens.count else {
            throw LoadError("streams \(first)..<\(first + count) but the token file has \(tokens.count) lines")
        }
        let transport = try transport(values)
        let loopCount = max(1, try values.integer("loops", in: 0...1024)!)
        let concurrency = try values.integer("concurrency", in: 0...1_000_000)!
        let perSource = max(1, try values.integer("streams-per-source", in: 0...10_000_000)!)
        let sourceBase = try values.string("source-base").map(ipv4)
        let openTimeout = Double(try values.integer("open-timeout", in: 0...86_400)!)
        let address = try SocketAddress(host: server.host, port: server.port)

        var orders: [[StreamOrder]] = Array(repeating: [], count: loopCount)
        for index in first..<(first + count) {
            let source = try sourceBase.map { base in
                try SocketAddress(host: dotted(base + UInt32(index / perSource)), port: 0)
            }
            orders[index % loopCount].append(StreamOrder(index: index, token: tokens[index].token, source: source))
        }
        let loops = (0..<loopCount).map { EventLoop.spawn(name: "streams-\($0)") }
        let sets = loops.map {
            StreamSet(
                loop: $0, server: address, transport: transport, maximumOpening: concurrency,
                recordsArrivals: values.isOn("record-arrivals"))
        }
        let started = MonotonicClock.now()
        let settled = DispatchSemaphore(value: 0)
        for (set, share) in zip(sets, orders) {
            set.loop.execute {
                set.onSettled = { settled.signal() }
                set.open(share)
            }
        }
        let deadline = DispatchTime.now() + openTimeout
        for _ in sets where settled.wait(timeout: deadline) == .timedOut {
            printError("ferry-load streams: not every stream opened or failed within \(Int(openTimeout)) s")
            break
        }
        let seconds = Double(MonotonicClock.now() - started) / 1e9
        var opened = 0
        var failures: [String: Int] = [:]
        for set in sets {
            let (ok, failed) = set.loop.runAndWait { (set.opened, set.failures) }
            opened += ok
            failures.merge(failed, uniquingKeysWith: +)
        }
        for (reason, number) in failures.sorted(by: { $0.value > $1.value }) {
            printLine("failure \(number) \(reason)")
        }
        printLine("opened \(opened) \(count - opened) \(String(format: "%.2f", seconds))")

        while let line = readLine() {
            let words = line.split(separator: " ")
            switch words.first {
            case "cued":
                let since = words.count > 1 ? UInt64(words[1]) ?? 0 : 0
                var total = 0
                var latest: UInt64 = 0
                for set in sets {
                    let (count, last) = set.loop.runAndWait { set.cued(since: since) }
                    total += count
                    latest = max(latest, last)
                }
                printLine("cued \(total) \(latest)")
            case "open":
                printLine("open \(sets.map { set in set.loop.runAndWait { set.openNow } }.reduce(0, +))")
            case "arrivals":
                var text = ""
                for set in sets {
                    for arrival in set.loop.runAndWait({ set.arrivals }) {
                        text += "arrival \(arrival.index) \(arrival.at)\n"
                    }
                }
                FileHandle.standardOutput.write(Data((text + "end\n").utf8))
            case "quit":
                stop(sets)
                return ExitStatus.success
            default:
                printLine("error unknown command")
            }
        }
        stop(sets)
        return ExitStatus.success
    }

    /// Closes every stream and waits until each loop has run its close callbacks
    /// (the streams report to their set until then, so the sets must outlive them).
    private static func stop(_ sets: [StreamSet]) {
        for set in sets { set.loop.runAndWait { set.closeAll() } }
        for set in sets { set.loop.stop() }
        for set in sets { set.loop.waitUntilStopped() }
        withExtendedLifetime(sets) {}
    }

    static func transport(_ values: SettingValues) throws(SettingsError) -> StreamTransport {
        StreamTransport(rawValue: try values.choice("transport", StreamTransport.allCases.map(\.rawValue))!)!
    }

    /// `a.b.c.d` as a number, so source addresses can be counted up from a base. Any
    /// IPv4 address: 127.0.0.0/8 on loopback, or the addresses of a network namespace the
    /// bench script made (`--worker-netns`).
    static func ipv4(_ text: String) throws(SettingsError) -> UInt32 {
        let parts = text.split(separator: ".").compactMap { UInt32($0) }
        guard parts.count == 4, parts.allSatisfy({ $0 < 256 }) else {
            throw SettingsError("invalid --source-base: \(text) (expected an IPv4 address)")
        }
        return parts.reduce(0) { $0 << 8 | $1 }
    }

    static func dotted(_ address: UInt32) -> String {
        "\(address >> 24).\((address >> 16) & 255).\((address >> 8) & 255).\(address & 255)"
    }
}
