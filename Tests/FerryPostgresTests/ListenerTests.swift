import FerryLoop
import FerryPostgres
import FerryTestSupport
import Synchronization
import Testing

@Suite(.hangLimit, .tags(.database), .tagSelection) struct ListenerTests {
    /// What the listener reported, in order.
    final class Log: Sendable {
        let events = Mutex<[String]>([])
        func append(_ event: String) { events.withLock { $0.append(event) } }
        var all: [String] { events.withLock { $0 } }
    }

    @Test func listenerRecoversAfterTerminationAndReportsTheGap() async throws {
        try await TestDatabase.with { database in
            try await withLoop { loop in
                let log = Log()
                let listener: LoopBound<Listener> = try await onLoop(loop) { done in
                    let listener = Listener(
                        loop: loop, configuration: database.configuration, channels: ["ferry_cue", "other \"one\""],
                        minimumBackoffMilliseconds: 50, maximumBackoffMilliseconds: 400)
                    listener.onNotification = { log.append("notify \($0.channel) \($0.payload)") }
                    listener.onStateChange = { log.append("\($0)") }
                    listener.onGap = { log.append("gap") }
                    listener.start()
                    done(LoopBound(listener, loop: loop))
                }
                try await waitUntil(loop, "listener connected") { listener.value.isConnected }
                let sender = try await database.connect()
                try await sender.query("select pg_notify('ferry_cue', 'one')")
                try await sender.query("select pg_notify('other \"one\"', 'two')")
                try await waitUntil(loop, "first notifications") { log.all.count == 3 }
                #expect(log.all == ["connected", "notify ferry_cue one", "notify other \"one\" two"])

                let pid: Int32 = try await onLoop(loop) { done in done(listener.value.backendPID ?? 0) }
                #expect(try await sender.query("select pg_terminate_backend($1)", [String(pid)])[0, 0] == "t")
                try await waitUntil(loop, "listener reconnected") { log.all.contains("gap") }
                #expect(Array(log.all.suffix(3)) == ["disconnected", "connected", "gap"])
                let newPID: Int32 = try await onLoop(loop) { done in done(listener.value.backendPID ?? 0) }
                #expect(newPID != pid && newPID != 0)

                try await sender.query("select pg_notify('ferry_cue', 'after')")
                try await waitUntil(loop, "notification after reconnect") { log.all.last == "notify ferry_cue after" }
                let stillConnected: Bool = try await onLoop(loop) { done in
                    listener.value.stop()
                    done(listener.value.isConnected)
                }
                #expect(!stillConnected)
                await sender.close()
            }
        }
    }

    /// The server accepts each connection attempt and closes it at once, so every
    /// attempt fails; the listener must come back for more, without reporting a state.
    @Test func listenerKeepsRetryingWhileTheServerIsUnreachable() async throws {
        try await withLoop { loop in
            let server = try LoopbackSocket(listening: true)
            let states = Log()
            let configuration = try PostgresConfiguration(
                "postgresql://postgres@127.0.0.1:\(server.port)/postgres", connectTimeoutMilliseconds: 2_000)
            let listener: LoopBound<Listener> = try await onLoop(loop) { done in
                let listener = Listener(
                    loop: loop, configuration: configuration, channels: ["c"], minimumBackoffMilliseconds: 10,
                    maximumBackoffMilliseconds: 40)
                listener.onStateChange = { states.append("\($0)") }
                listener.start()
                done(LoopBound(listener, loop: loop))
            }
            var attempts = 0
            _ = try await eventuallyHolds(seconds: 20) {
                attempts += server.acceptWaiting()
                return attempts >= 3
            }
            let connected: Bool = try await onLoop(loop) { done in
                let connected = listener.value.isConnected
                listener.value.stop()
                done(connected)
            }
            #expect(attempts >= 3, "connection attempts within 20 s")
            #expect(!connected)
            #expect(states.all.isEmpty)
        }
    }
}
