import FerryLoad
import FerryLoop
import Foundation

/// `ferry-load`: the load generator behind bench/realtime.sh. Loopback, or a network
/// namespace the bench script made (bench/broadcast-netns.sh).
@main
enum FerryLoadCLI {
    static let usage = """
        usage: ferry-load <command> [--name value ...]

          signup     --url U --count N --out FILE [--connections 32]
                     sign up N anonymous users (POST /v1/auth/anonymous), write `user id<TAB>token` lines
          idle       --url U --tokens FILE --streams N [stream options] --server-pids P[,P...]
                     open N idle streams; the servers' resident memory per stream
          latency    --url U --tokens FILE --streams N --database-url DB [--table bench_items]
                     [--rate 200] [--seconds 20] [--write upsert|notify] [stream options]
                     commit -> cue latency for random users among the N, and a bare LISTEN as the floor
          broadcast  --url U --tokens FILE --streams N --database-url DB [--table bench_news]
                     [--rounds 5] [stream options]
                     one statement on a shared table: commit -> the last stream's cue
          churn      --url U --tokens FILE --streams N --server-pids P[,P...] [--rounds 40]
                     [--pause-seconds 0] [stream options]
                     open N streams, hang up, again: the servers' memory growth per stream lifecycle
          streams    (a worker the commands above start; reads commands on standard input)

        stream options: --transport websocket|sse (websocket) --server-pids P[,P...] (memory figures)
          --streams-per-process N (the file limit allows; one worker process per share)
          --loops-per-process 1 --concurrency 256 (handshakes in flight per loop)
          --source-base 127.A.B.1 (random) --streams-per-source 20000 --settle-seconds 3
          --open-timeout 300 --worker-netns NAME (workers run in that network namespace)
        Figures are printed as `name value` lines.
        """

    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard let command = arguments.first, command != "--help", command != "-h" else {
            printLine(usage)
            exit(arguments.isEmpty ? 2 : 0)
        }
        raiseFileLimit()
        do {
            let options = try Options(Array(arguments.dropFirst()))
            switch command {
            case "signup": try SignUpCommand.run(options)
            case "streams": try StreamsWorker.run(options)
            case "idle": try Measurements.idle(options)
            case "latency": try Measurements.latency(options)
            case "broadcast": try Measurements.broadcast(options)
            case "churn": try Measurements.churn(options)
            default: throw UsageError("unknown command \(command)")
            }
            exit(0)
        } catch let error as UsageError {
            printError("ferry-load: \(error)\n\n\(usage)")
            exit(2)
        } catch {
            printError("ferry-load \(command): \(error)")
            exit(1)
        }
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

/// `ferry-load signup`: anonymous users and their tokens, through the API.
enum SignUpCommand {
    static func run(_ options: Options) throws {
        let server = try serverAddress(try options.string("url"))
        let count = try options.integer("count")
        let output = try options.string("out")
        let connections = try options.integer("connections", default: 32)
        let loop = EventLoop.spawn(name: "signup")
        defer {
            loop.stop()
            loop.waitUntilStopped()
        }
        let started = MonotonicClock.now()
        let address = try SocketAddress(host: server.host, port: server.port)
        let (users, failure) = waitOnLoop(loop) { (done: @escaping (([SignedUpUser], String?)) -> Void) in
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
    }
}
