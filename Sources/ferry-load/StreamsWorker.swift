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
enum StreamsWorker {
    static func run(_ options: Options) throws {
        let server = try serverAddress(try options.string("url"))
        let tokens = try readTokens(try options.string("tokens"))
        let first = try options.integer("first", default: 0)
        let count = try options.integer("count")
        guard first + count <= tokens.count else {
            throw LoadError("streams \(first)..<\(first + count) but the token file has \(tokens.count) lines")
        }
        let transport = try transport(options)
        let loopCount = max(1, try options.integer("loops", default: 1))
        let concurrency = try options.integer("concurrency", default: 256)
        let perSource = max(1, try options.integer("streams-per-source", default: 20_000))
        let sourceBase = try options.optionalString("source-base").map(ipv4)
        let openTimeout = Double(try options.integer("open-timeout", default: 300))
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
                recordsArrivals: options.flag("record-arrivals"))
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
            let (ok, failed) = onLoop(set.loop) { (set.opened, set.failures) }
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
                    let (count, last) = onLoop(set.loop) { set.cued(since: since) }
                    total += count
                    latest = max(latest, last)
                }
                printLine("cued \(total) \(latest)")
            case "open":
                printLine("open \(sets.map { set in onLoop(set.loop) { set.openNow } }.reduce(0, +))")
            case "arrivals":
                var text = ""
                for set in sets {
                    for arrival in onLoop(set.loop, { set.arrivals }) {
                        text += "arrival \(arrival.index) \(arrival.at)\n"
                    }
                }
                FileHandle.standardOutput.write(Data((text + "end\n").utf8))
            case "quit":
                return stop(sets)
            default:
                printLine("error unknown command")
            }
        }
        stop(sets)
    }

    /// Closes every stream and waits until each loop has run its close callbacks
    /// (the streams report to their set until then, so the sets must outlive them).
    private static func stop(_ sets: [StreamSet]) {
        for set in sets { onLoop(set.loop) { set.closeAll() } }
        for set in sets { set.loop.stop() }
        for set in sets { set.loop.waitUntilStopped() }
        withExtendedLifetime(sets) {}
    }

    static func transport(_ options: Options) throws(UsageError) -> StreamTransport {
        let name = options.string("transport", default: "websocket")
        guard let transport = StreamTransport(rawValue: name) else {
            throw UsageError("--transport is websocket or sse, not \(name)")
        }
        return transport
    }

    /// `a.b.c.d` as a number, so source addresses can be counted up from a base. Any
    /// IPv4 address: 127.0.0.0/8 on loopback, or the addresses of a network namespace the
    /// bench script made (`--worker-netns`).
    static func ipv4(_ text: String) throws(UsageError) -> UInt32 {
        let parts = text.split(separator: ".").compactMap { UInt32($0) }
        guard parts.count == 4, parts.allSatisfy({ $0 < 256 }) else {
            throw UsageError("--source-base must be an IPv4 address, not \(text)")
        }
        return parts.reduce(0) { $0 << 8 | $1 }
    }

    static func dotted(_ address: UInt32) -> String {
        "\(address >> 24).\((address >> 16) & 255).\((address >> 8) & 255).\(address & 255)"
    }
}
