import FerryCommandLine
import FerryLoad
import FerryLoop
import Foundation

/// The coordinator's view of the worker processes that hold the streams
/// (``StreamsWorker``): it starts them, waits until every stream opened or failed,
/// and asks them for their figures.
final class StreamFleet {
    private(set) var workers: [Worker] = []
    /// Streams asked for.
    let requested: Int
    /// Streams that opened (hello received).
    private(set) var opened = 0
    /// Seconds until every worker had settled.
    private(set) var openSeconds = 0.0

    /// Starts enough workers for `count` streams (the first `count` tokens) and waits
    /// until each reports. Failures are printed as `stream_failures <n> <reason>` lines.
    init(values: SettingValues, count: Int, recordArrivals: Bool = false) throws {
        requested = count
        let fileLimit = FerryLoadCLI.fileLimit
        let perProcess = try values.integer("streams-per-process", in: 1...10_000_000) ?? max(100, fileLimit - 256)
        let processes = max(1, (count + perProcess - 1) / perProcess)
        let base = values.string("source-base") ?? "127.\(Int.random(in: 16...250)).\(Int.random(in: 0...255)).1"
        // The worker reads these itself (``StreamsWorker``), so they are checked there.
        var forwarded: [String] = [
            "--url", values.string("url")!, "--tokens", values.string("tokens")!,
            "--transport", values.string("transport")!, "--loops", values.string("loops-per-process")!,
            "--concurrency", values.string("concurrency")!, "--streams-per-source",
            values.string("streams-per-source")!,
            "--source-base", base, "--open-timeout", values.string("open-timeout")!,
        ]
        if recordArrivals { forwarded.append("--record-arrivals") }
        let namespace = values.string("worker-netns")
        let started = MonotonicClock.now()
        var first = 0
        for process in 0..<processes {
            let share = count / processes + (process < count % processes ? 1 : 0)
            workers.append(
                try Worker(
                    arguments: ["streams", "--first", String(first), "--count", String(share)] + forwarded,
                    namespace: namespace))
            first += share
        }
        var failures: [String: Int] = [:]
        for worker in workers {
            while true {
                guard let line = worker.readLine() else { throw LoadError("a stream worker exited while opening") }
                if line.hasPrefix("failure ") {
                    let words = line.split(separator: " ", maxSplits: 2)
                    failures[String(words[2]), default: 0] += Int(words[1]) ?? 0
                } else if line.hasPrefix("opened ") {
                    opened += Int(line.split(separator: " ")[1]) ?? 0
                    break
                }
            }
        }
        openSeconds = Double(MonotonicClock.now() - started) / 1e9
        for (reason, number) in failures.sorted(by: { $0.value > $1.value }) {
            printLine("stream_failures \(number) \(reason)")
        }
    }

    /// Streams whose latest cue arrived at or after `since`, and the latest arrival (monotonic ns).
    func cued(since: UInt64) throws -> (count: Int, latest: UInt64) {
        var count = 0
        var latest: UInt64 = 0
        for worker in workers {
            let words = try worker.ask("cued \(since)").split(separator: " ")
            guard words.count == 3, words[0] == "cued", let n = Int(words[1]), let last = UInt64(words[2]) else {
                throw LoadError("a stream worker answered `cued` oddly")
            }
            count += n
            latest = max(latest, last)
        }
        return (count, latest)
    }

    /// Streams open now, every worker together.
    func openNow() throws -> Int {
        try workers.map { worker in
            let words = try worker.ask("open").split(separator: " ")
            guard words.count == 2, let n = Int(words[1]) else {
                throw LoadError("a stream worker answered `open` oddly")
            }
            return n
        }.reduce(0, +)
    }

    /// Every cue arrival the workers recorded (only with `recordArrivals`).
    func arrivals() throws -> [CueLatency.Event] {
        var events: [CueLatency.Event] = []
        for worker in workers {
            worker.send("arrivals")
            while let line = worker.readLine(), line != "end" {
                let words = line.split(separator: " ")
                guard words.count == 3, let index = Int(words[1]), let at = UInt64(words[2]) else { continue }
                events.append(CueLatency.Event(user: index, at: at))
            }
        }
        return events
    }

    /// The worker processes' ids.
    var pids: [Int32] { workers.map(\.pid) }

    /// Closes every stream and waits for the workers to exit.
    func stop() {
        for worker in workers { worker.send("quit") }
        for worker in workers { worker.wait() }
        workers = []
    }

    /// One `ferry-load streams` child process, spoken to by lines.
    final class Worker {
        private let process = Process()
        private let input = Pipe()
        private let output = Pipe()
        private var buffer: [UInt8] = []

        /// With a `namespace`, the worker runs in that network namespace (`ip netns exec`,
        /// which executes the worker in its own process: the process id stays the worker's).
        init(arguments: [String], namespace: String? = nil) throws {
            let executable = try Self.ownExecutable()
            if let namespace {
                process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                process.arguments = ["ip", "netns", "exec", namespace, executable] + arguments
            } else {
                process.executableURL = URL(fileURLWithPath: executable)
                process.arguments = arguments
            }
            process.standardInput = input
            process.standardOutput = output
            try process.run()
        }

        /// The worker's process id.
        var pid: Int32 { process.processIdentifier }

        func send(_ line: String) {
            input.fileHandleForWriting.write(Data((line + "\n").utf8))
        }

        func ask(_ line: String) throws -> String {
            send(line)
            guard let answer = readLine() else { throw LoadError("a stream worker exited") }
            return answer
        }

        /// The next line the worker printed; nil once it has exited.
        func readLine() -> String? {
            while true {
                if let newline = buffer.firstIndex(of: 10) {
                    let line = String(decoding: buffer[..<newline], as: UTF8.self)
                    buffer.removeFirst(newline + 1)
                    return line
                }
                let data = output.fileHandleForReading.availableData
                if data.isEmpty { return nil }
                buffer += data
            }
        }

        func wait() {
            try? input.fileHandleForWriting.close()
            process.waitUntilExit()
        }

        /// The path of this very executable, so workers run the same build.
        private static func ownExecutable() throws -> String {
            var path = [CChar](repeating: 0, count: 4096)
            let length = readlink("/proc/self/exe", &path, path.count - 1)
            guard length > 0 else { throw LoadError("cannot find my own executable") }
            return String(decoding: path[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }
}
