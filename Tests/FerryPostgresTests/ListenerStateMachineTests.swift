import FerryPostgres
import FerryTestSupport
import Synchronization
import Testing

@Suite(.tagSelection) struct ListenerStateMachineTests {
    typealias Machine = ListenerStateMachine
    let note = PostgresNotification(channel: "ferry_cue", payload: "p", senderPID: 7)

    /// A machine with no jitter, 100 ms to 1 s of backoff.
    func idleMachine(jitter: @escaping Machine.Jitter = { _ in 0 }) -> Machine {
        Machine(
            channels: ["ferry_cue"], minimumBackoffMilliseconds: 100, maximumBackoffMilliseconds: 1_000, jitter: jitter)
    }

    /// A machine that has connected and listened once.
    func listeningMachine() -> Machine {
        var machine = idleMachine()
        #expect(machine.start() == .connect)
        #expect(machine.connectSucceeded() == .listen(sql: #"LISTEN "ferry_cue""#))
        #expect(machine.listenSucceeded() == .reportListening(gap: false))
        return machine
    }

    /// A machine waiting for its retry timer after losing a listening connection at `now`.
    func waitingMachine(now: UInt64 = 1_000) -> Machine {
        var machine = listeningMachine()
        #expect(machine.connectionLost(now: now) == .reportDownAndRetry(afterMilliseconds: 100))
        return machine
    }

    /// The action was not the ``ListenerStateMachine/Action/retry(afterMilliseconds:)`` expected.
    struct NotARetry: Error, CustomStringConvertible {
        let action: Machine.Action
        var description: String { "expected a retry, got \(action)" }
    }

    /// The wait a retry action asks for.
    func retryWait(_ action: Machine.Action) throws -> UInt64 {
        guard case .retry(let milliseconds) = action else { throw NotARetry(action: action) }
        return milliseconds
    }

    // MARK: - Transitions

    @Test func startConnectsOnce() {
        var machine = idleMachine()
        #expect(machine.state == .idle)
        #expect(machine.start() == .connect)
        #expect(machine.state == .connecting)
        #expect(machine.start() == .none)
        #expect(machine.state == .connecting)
    }

    @Test func anOpenedConnectionListensOnEveryChannelQuoted() {
        var machine = Machine(
            channels: ["ferry_cue", #"other "one""#], minimumBackoffMilliseconds: 10, maximumBackoffMilliseconds: 40,
            jitter: { _ in 0 })
        _ = machine.start()
        #expect(machine.connectSucceeded() == .listen(sql: #"LISTEN "ferry_cue"; LISTEN "other ""one""""#))
        #expect(machine.state == .subscribing)
        #expect(!machine.isListening)
    }

    @Test func theFirstListenIsNoGap() {
        let machine = listeningMachine()
        #expect(machine.state == .listening)
        #expect(machine.isListening)
        #expect(machine.hasListened)
    }

    @Test func aFailedConnectWaitsThenConnectsAgain() {
        var machine = idleMachine()
        _ = machine.start()
        #expect(machine.connectFailed(now: 5_000) == .retry(afterMilliseconds: 100))
        #expect(machine.state == .waiting(until: 5_100))
        #expect(machine.retryTimerFired(now: 5_100) == .connect)
        #expect(machine.state == .connecting)
    }

    @Test func aTimerThatFiresEarlyWaitsTheRest() {
        var machine = waitingMachine(now: 1_000)
        #expect(machine.retryTimerFired(now: 1_060) == .retry(afterMilliseconds: 40))
        #expect(machine.state == .waiting(until: 1_100))
        #expect(machine.retryTimerFired(now: 1_100) == .connect)
    }

    @Test func aFailedListenClosesTheConnectionAndRetries() {
        var machine = idleMachine()
        _ = machine.start()
        _ = machine.connectSucceeded()
        #expect(machine.listenFailed(now: 0) == .closeConnectionAndRetry(afterMilliseconds: 100))
        #expect(machine.state == .waiting(until: 100))
        #expect(!machine.hasListened)
    }

    @Test func aLostConnectionReportsTheListenerDownAndRetries() {
        var machine = listeningMachine()
        #expect(machine.connectionLost(now: 2_000) == .reportDownAndRetry(afterMilliseconds: 100))
        #expect(machine.state == .waiting(until: 2_100))
        #expect(!machine.isListening)
    }

    // MARK: - Backoff

    @Test func backoffDoublesAfterEachFailedAttemptUpToItsCap() throws {
        var machine = waitingMachine(now: 0)
        var now: UInt64 = 0
        var waits: [UInt64] = [100]
        for _ in 0..<6 {
            now += waits.last!
            #expect(machine.retryTimerFired(now: now) == .connect)
            let wait = try retryWait(machine.connectFailed(now: now))
            waits.append(wait)
        }
        #expect(waits == [100, 200, 400, 800, 1_000, 1_000, 1_000])
    }

    /// What a gateway's listener does after a failover (docs/HA.md): tries again within
    /// 120 ms, then at most every 600 ms (500 and its jitter) until the new primary answers.
    @Test func theListenersDefaultScheduleRetriesPromptlyAndAtMostTwiceASecondOnceCapped() throws {
        var machine = Machine(
            channels: ["ferry_cue"], minimumBackoffMilliseconds: Listener.defaultMinimumBackoffMilliseconds,
            maximumBackoffMilliseconds: Listener.defaultMaximumBackoffMilliseconds, jitter: { $0 })
        _ = machine.start()
        _ = machine.connectSucceeded()
        _ = machine.listenSucceeded()
        var now: UInt64 = 0
        guard case .reportDownAndRetry(var wait) = machine.connectionLost(now: now) else {
            Issue.record("losing the connection did not retry")
            return
        }
        var waits: [UInt64] = []
        for _ in 0..<8 {
            waits.append(wait)
            now += wait
            #expect(machine.retryTimerFired(now: now) == .connect)
            wait = try retryWait(machine.connectFailed(now: now))
        }
        #expect(waits == [120, 240, 480, 600, 600, 600, 600, 600])
    }

    @Test func failedListensGrowTheBackoffLikeFailedConnects() {
        var machine = waitingMachine(now: 0)
        #expect(machine.retryTimerFired(now: 100) == .connect)
        _ = machine.connectSucceeded()
        #expect(machine.listenFailed(now: 100) == .closeConnectionAndRetry(afterMilliseconds: 200))
        #expect(machine.retryTimerFired(now: 300) == .connect)
        #expect(machine.connectFailed(now: 300) == .retry(afterMilliseconds: 400))
    }

    @Test func listeningAgainResetsTheBackoff() {
        var machine = waitingMachine(now: 0)
        #expect(machine.retryTimerFired(now: 100) == .connect)
        #expect(machine.connectFailed(now: 100) == .retry(afterMilliseconds: 200))
        #expect(machine.retryTimerFired(now: 300) == .connect)
        #expect(machine.connectFailed(now: 300) == .retry(afterMilliseconds: 400))
        #expect(machine.retryTimerFired(now: 700) == .connect)
        _ = machine.connectSucceeded()
        _ = machine.listenSucceeded()
        #expect(machine.backoffMilliseconds == 100)
        #expect(machine.connectionLost(now: 900) == .reportDownAndRetry(afterMilliseconds: 100))
    }

    @Test func aCapBelowTheMinimumIsRaisedToIt() {
        var machine = Machine(
            channels: ["c"], minimumBackoffMilliseconds: 300, maximumBackoffMilliseconds: 50, jitter: { _ in 0 })
        #expect(machine.maximumBackoffMilliseconds == 300)
        _ = machine.start()
        #expect(machine.connectFailed(now: 0) == .retry(afterMilliseconds: 300))
        #expect(machine.retryTimerFired(now: 300) == .connect)
        #expect(machine.connectFailed(now: 300) == .retry(afterMilliseconds: 300))
    }

    @Test func aHugeBackoffSaturatesInsteadOfOverflowing() {
        var machine = Machine(
            channels: ["c"], minimumBackoffMilliseconds: UInt64.max / 3, maximumBackoffMilliseconds: .max,
            jitter: { $0 })
        _ = machine.start()
        #expect(machine.connectFailed(now: 10) == .retry(afterMilliseconds: UInt64.max / 3 + UInt64.max / 15))
        #expect(machine.state == .waiting(until: UInt64.max / 3 + UInt64.max / 15 + 10))
        #expect(machine.backoffMilliseconds == UInt64.max / 3 * 2)
        #expect(machine.retryTimerFired(now: .max - 1) == .connect)
        #expect(machine.connectFailed(now: .max - 1) == .retry(afterMilliseconds: UInt64.max / 3 * 2 / 5 * 6))
        #expect(machine.state == .waiting(until: .max))
        #expect(machine.backoffMilliseconds == .max)
        #expect(machine.retryTimerFired(now: .max) == .connect)
        #expect(machine.connectFailed(now: .max) == .retry(afterMilliseconds: .max))
    }

    // MARK: - Jitter

    @Test func jitterIsAskedForAtMostAFifthOfTheBackoff() throws {
        let asked = Mutex<[UInt64]>([])
        var machine = idleMachine { maximum in
            asked.withLock { $0.append(maximum) }
            return maximum
        }
        _ = machine.start()
        var waits: [UInt64] = []
        var now: UInt64 = 0
        for _ in 0..<5 {
            let wait = try retryWait(machine.connectFailed(now: now))
            waits.append(wait)
            now += wait
            _ = machine.retryTimerFired(now: now)
        }
        #expect(asked.withLock { $0 } == [20, 40, 80, 160, 200])
        #expect(waits == [120, 240, 480, 960, 1_200])
    }

    @Test func jitterBeyondItsBoundIsCutToIt() {
        var machine = idleMachine { _ in .max }
        _ = machine.start()
        #expect(machine.connectFailed(now: 0) == .retry(afterMilliseconds: 120))
        #expect(machine.state == .waiting(until: 120))
    }

    @Test func everyWaitIsWithinItsJitterBounds() throws {
        var machine = idleMachine { UInt64.random(in: 0...$0) }
        _ = machine.start()
        var now: UInt64 = 0
        for _ in 0..<200 {
            let base = machine.backoffMilliseconds
            let wait = try retryWait(machine.connectFailed(now: now))
            #expect((base...(base + base / 5)).contains(wait), "wait \(wait) for a backoff of \(base)")
            now += wait
            _ = machine.retryTimerFired(now: now)
        }
    }

    // MARK: - Gaps

    @Test func connectingOnlyAfterFailuresIsNoGap() {
        var machine = idleMachine()
        _ = machine.start()
        _ = machine.connectFailed(now: 0)
        _ = machine.retryTimerFired(now: 100)
        _ = machine.connectSucceeded()
        _ = machine.listenFailed(now: 100)
        _ = machine.retryTimerFired(now: 300)
        _ = machine.connectSucceeded()
        #expect(machine.listenSucceeded() == .reportListening(gap: false))
    }

    @Test func theGapIsSignalledOncePerOutageHoweverManyAttemptsItTakes() throws {
        var machine = waitingMachine(now: 0)
        var now: UInt64 = 100
        var reports: [Machine.Action] = []
        for _ in 0..<3 {
            #expect(machine.retryTimerFired(now: now) == .connect)
            let wait = try retryWait(machine.connectFailed(now: now))
            now += wait
        }
        #expect(machine.retryTimerFired(now: now) == .connect)
        _ = machine.connectSucceeded()
        reports.append(machine.listenFailed(now: now))
        now += 2_000
        #expect(machine.retryTimerFired(now: now) == .connect)
        _ = machine.connectSucceeded()
        reports.append(machine.listenSucceeded())
        #expect(reports == [.closeConnectionAndRetry(afterMilliseconds: 1_000), .reportListening(gap: true)])
        #expect(machine.notificationReceived(note) == .deliver(note))

        // The next outage has its own gap.
        #expect(machine.connectionLost(now: now) == .reportDownAndRetry(afterMilliseconds: 100))
        #expect(machine.retryTimerFired(now: now + 100) == .connect)
        _ = machine.connectSucceeded()
        #expect(machine.listenSucceeded() == .reportListening(gap: true))
    }

    // MARK: - Notifications

    @Test func notificationsAreDeliveredOnlyOnceListenIsSent() {
        var machine = idleMachine()
        #expect(machine.notificationReceived(note) == .none)
        _ = machine.start()
        #expect(machine.notificationReceived(note) == .none)
        _ = machine.connectSucceeded()
        #expect(machine.notificationReceived(note) == .deliver(note))
        _ = machine.listenSucceeded()
        #expect(machine.notificationReceived(note) == .deliver(note))
        _ = machine.connectionLost(now: 0)
        #expect(machine.notificationReceived(note) == .none)
        _ = machine.retryTimerFired(now: 100)
        _ = machine.connectSucceeded()
        _ = machine.listenSucceeded()
        _ = machine.close()
        #expect(machine.notificationReceived(note) == .none)
    }

    // MARK: - Closing

    @Test func closeBeforeStartMakesStartDoNothing() {
        var machine = idleMachine()
        #expect(machine.close() == .none)
        #expect(machine.state == .closed)
        #expect(machine.start() == .none)
        #expect(machine.state == .closed)
    }

    @Test func closeWhileConnectingClosesTheConnectionThatOpensLater() {
        var opened = idleMachine()
        _ = opened.start()
        #expect(opened.close() == .none)
        #expect(opened.connectSucceeded() == .closeConnection)
        #expect(opened.state == .closed)

        var failed = idleMachine()
        _ = failed.start()
        _ = failed.close()
        #expect(failed.connectFailed(now: 0) == .none)
        #expect(failed.state == .closed)
    }

    @Test func closeWhileSubscribingClosesTheConnection() {
        var machine = idleMachine()
        _ = machine.start()
        _ = machine.connectSucceeded()
        #expect(machine.close() == .closeConnection)
        #expect(machine.listenFailed(now: 0) == .none)
        #expect(machine.listenSucceeded() == .none)
        #expect(machine.state == .closed)
    }

    @Test func closeWhileListeningClosesTheConnectionAndReportsTheListenerDown() {
        var machine = listeningMachine()
        #expect(machine.close() == .closeConnectionAndReportDown)
        #expect(machine.connectionLost(now: 0) == .none)
        #expect(machine.state == .closed)
        #expect(!machine.isListening)
    }

    @Test func closeWhileWaitingCancelsTheRetry() {
        var machine = waitingMachine(now: 0)
        #expect(machine.close() == .cancelRetry)
        #expect(machine.retryTimerFired(now: 100) == .none)
        #expect(machine.state == .closed)
    }

    @Test func closeAfterCloseDoesNothing() {
        var machine = listeningMachine()
        _ = machine.close()
        #expect(machine.close() == .none)
        #expect(machine.start() == .none)
        #expect(machine.state == .closed)
    }
}
