import FerryCommandLine
import FerryLoad
import FerryLoop
import Foundation

/// `ferry-load`: the load generator behind bench/realtime.sh. Loopback, or a network
/// namespace the bench script made (bench/broadcast-netns.sh). Figures are printed as
/// `name value` lines.
@main
enum FerryLoadCLI {
    static var tool: CommandLineTool {
        CommandLineTool(
            name: "ferry-load", summary: "ferry-load: Ferry's load generator (bench/README.md)",
            commands: [
                SignUpCommand.self, Measurements.Idle.self, Measurements.Latency.self, Measurements.Broadcast.self,
                Measurements.Churn.self,
                StreamsWorker.self, FleetCommand.self, StormCommand.self, StormWorker.self,
            ])
    }

    static func main() {
        raiseFileLimit()
        exit(tool.run(Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment))
    }

    /// Lifts the soft open-file limit to the hard one: every stream is a descriptor.
    static func raiseFileLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    /// The open-file limit now in force.
    static var fileLimit: Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        return Int(clamping: limit.rlim_cur)
    }
}

/// The settings ferry-load's commands share.
enum LoadSettings {
    static let url = Setting("url", help: "the gateway, http://<numeric host>:<port>")
    static let tokens = Setting("tokens", help: "the `user id<TAB>token` file ferry-load signup wrote")
    static let streams = Setting("streams", help: "streams to open, one per line of the token file from the first")
    static let serverPIDs = Setting(
        "server-pids", help: "the gateways' process ids, comma-separated (their memory and CPU)")
    static let databaseURL = Setting("database-url", help: "PostgreSQL URL of the bench database, as its owner")

    /// How the streams open (``StreamFleet``), and when memory is read after.
    static let streamOptions: [Setting] = [
        Setting("transport", default: "websocket", help: "websocket or sse"),
        Setting(
            "streams-per-process", help: "streams per worker process (default: what the open-file limit allows)",
            isOptional: true),
        Setting("loops-per-process", default: "1", help: "event loops per worker process"),
        Setting("concurrency", default: "256", help: "handshakes in flight per loop"),
        Setting("source-base", help: "the first source address, 127.A.B.1 (default: random)", isOptional: true),
        Setting("streams-per-source", default: "20000", help: "streams per source address"),
        Setting("settle-seconds", default: "3", help: "seconds between the last stream opening and a memory reading"),
        Setting("open-timeout", default: "300", help: "seconds every stream has to open or fail"),
        Setting("worker-netns", help: "network namespace the worker processes run in", isOptional: true),
    ]
}

/// `ferry-load signup`: anonymous users and their tokens, through the API.
enum SignUpCommand: Command {
    static let name = "signup"
    static let summary = "sign up anonymous users (POST /v1/auth/anonymous), write `user id<TAB>token` lines"
    static let usage = "ferry-load signup --url U --count N --out FILE [--connections 32]"
    static let settings = [
        LoadSettings.url,
        Setting("count", help: "users to sign up"),
        Setting("out", help: "the token file to write"),
        Setting("connections", default: "32", help: "keep-alive connections, one request in flight on each"),
    ]

    static func run(_ values: SettingValues) throws -> Int32 {
        let server = try serverAddress(values.string("url")!)
        let count = try values.integer("count", in: 0...10_000_000)!
        let output = values.string("out")!
        let connections = try values.integer("connections", in: 1...10_000)!
        let loop = EventLoop.spawn(name: "signup")
        defer {
            loop.stop()
            loop.waitUntilStopped()
        }
        let started = MonotonicClock.now()
        let address = try SocketAddress(host: server.host, port: server.port)
        let (users, failure) = loop.waitForCallback { (done: @escaping (([SignedUpUser], String?)) -> Void) in
            let signUps = AnonymousSignUps(loop: loop, server: address, count: count, connections: connections)
            signUps.run { done((signUps.users, signUps.failure)) }
        }!
        if let failure { throw LoadError(failure) }
        let seconds = Double(MonotonicClock.now() - started) / 1e9
        let text = users.map { "\($0.userID)\t\($0.accessToken)\n" }.joined()
        try text.write(toFile: output, atomically: true, encoding: .utf8)
        printLine("signed_up \(users.count)")
        printLine("signup_seconds \(String(format: "%.1f", seconds))")
        printLine("signups_per_second \(Int(Double(users.count) / max(seconds, 0.001)))")
        return ExitStatus.success
    }
}
