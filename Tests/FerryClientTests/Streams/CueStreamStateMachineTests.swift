import FerryTestSupport
import Testing

@testable import FerryClient

/// The stream's policy, step by step, with a fixed clock and fixed randomness.
@Suite(.tagSelection) struct CueStreamStateMachineTests {
    typealias Machine = CueStreamStateMachine
    let t0 = ContinuousClock.now

    func machine(
        transport: Machine.Transport = .serverSentEvents, fallsBack: Bool = true, random: Double = 0.999
    ) -> Machine {
        Machine(
            settings: Machine.Settings(
                backoffBase: .milliseconds(500), backoffCap: .seconds(30), openTimeout: .seconds(15),
                healthyAfter: .seconds(10), transport: transport, fallsBackToServerSentEvents: fallsBack,
                random: { random }))
    }

    func at(_ seconds: Double) -> ContinuousClock.Instant { t0 + .milliseconds(Int(seconds * 1000)) }

    /// Starts `machine` and opens generation 1 at t0 with a 1 s heartbeat.
    func opened(_ machine: inout Machine) {
        _ = machine.start(now: t0)
        _ = machine.tokenReady(generation: 1, token: "t1", now: t0)
        _ = machine.received([.hello(heartbeatMilliseconds: 1000)], generation: 1, now: t0)
    }

    /// The delay of the backoff the machine is in: the time from `now` to its deadline.
    func delay(_ machine: Machine, from now: ContinuousClock.Instant) -> Duration? {
        machine.deadline.map { $0 - now }
    }

    // MARK: - Opening

    @Test func startFetchesATokenOpensAndReportsOpenedOnHello() {
        var machine = machine()
        #expect(machine.start(now: t0) == [.fetchToken(1, forceRefresh: false)])
        #expect(machine.start(now: t0) == [], "a second start while running does nothing")
        #expect(machine.tokenReady(generation: 1, token: "t1", now: t0) == [.open(1, .serverSentEvents, token: "t1")])
        #expect(machine.received([], generation: 1, now: at(1)) == [], "bytes before hello open nothing")
        #expect(machine.received([.hello(heartbeatMilliseconds: 1000)], generation: 1, now: at(1)) == [.emit(.opened)])
        #expect(machine.openGeneration == 1)
        #expect(
            machine.received([.cue(tables: ["tasks"], origin: "d")], generation: 1, now: at(2)) == [
                .emit(.cue(tables: ["tasks"], origin: "d"))
            ])
    }

    @Test func aConnectionWithoutHelloInTimeIsGivenUpAndRetried() {
        var machine = machine()
        _ = machine.start(now: t0)
        _ = machine.tokenReady(generation: 1, token: "t1", now: t0)
        #expect(machine.deadline == at(15))
        #expect(machine.tick(now: at(14.9)) == [])
        #expect(machine.tick(now: at(15)) == [.close(1), .emit(.disconnected(reason: "no hello within 15.0 seconds"))])
        #expect(machine.tick(now: machine.deadline!) == [.fetchToken(2, forceRefresh: false)])
    }

    @Test func aTokenThatCannotBeHadBacksOffAndAsksAgain() {
        var machine = machine()
        _ = machine.start(now: t0)
        #expect(machine.tokenFailed(generation: 1, now: t0) == [.emit(.disconnected(reason: "no access token"))])
        #expect(machine.tick(now: machine.deadline!) == [.fetchToken(2, forceRefresh: false)])
    }

    // MARK: - Silence

    @Test func silenceForTwoHeartbeatsIsALostConnection() {
        var machine = machine()
        opened(&machine)
        #expect(machine.deadline == at(2))
        // A heartbeat (any byte) moves the watchdog.
        _ = machine.received([], generation: 1, now: at(1.5))
        #expect(machine.tick(now: at(2)) == [])
        #expect(machine.deadline == at(3.5))
        #expect(machine.tick(now: at(3.5)) == [.close(1), .emit(.disconnected(reason: "silent for 2.0 seconds"))])
        #expect(machine.openGeneration == nil)
        #expect(machine.tick(now: machine.deadline!) == [.fetchToken(2, forceRefresh: false)])
    }

    // MARK: - Backoff

    @Test func theBackoffDoublesFromHalfASecondToThirtyWithFullJitter() {
        var machine = machine(random: 0.5)
        _ = machine.start(now: t0)
        var now = t0
        var delays: [Duration] = []
        for generation in 1...10 {
            _ = machine.ended(generation: UInt64(generation), .failed("refused"), now: now)
            delays.append(delay(machine, from: now)!)
            now = machine.deadline!
            _ = machine.tick(now: now)
        }
        let expected: [Double] = [0.5, 1, 2, 4, 8, 16, 30, 30, 30, 30].map { $0 * 0.5 }
        #expect(delays == expected.map { Duration.milliseconds(Int($0 * 1000)) })
    }

    @Test func theJitterComesFromTheInjectedRandomnessAndStaysInRange() {
        for (random, expected) in [(0.0, Duration.zero), (0.25, .milliseconds(125)), (7.0, .milliseconds(500))] {
            var machine = machine(random: random)
            _ = machine.start(now: t0)
            _ = machine.ended(generation: 1, .failed("x"), now: t0)
            #expect(delay(machine, from: t0) == expected, "random \(random)")
        }
    }

    @Test func aHealthyOpenResetsTheBackoffAndAShortOneDoesNot() {
        var machine = machine(random: 0.999)
        _ = machine.start(now: t0)
        var now = t0
        for generation in 1...5 {
            _ = machine.ended(generation: UInt64(generation), .failed("x"), now: now)
            now = machine.deadline!
            _ = machine.tick(now: now)
        }
        // Generation 6 opens for less than healthyAfter: the backoff keeps growing.
        _ = machine.tokenReady(generation: 6, token: "t", now: now)
        _ = machine.received([.hello(heartbeatMilliseconds: 60_000)], generation: 6, now: now)
        _ = machine.ended(generation: 6, .closed(code: 1001, reason: "going_away"), now: now + .seconds(5))
        #expect(delay(machine, from: now + .seconds(5))! > .seconds(15))
        now = machine.deadline!
        _ = machine.tick(now: now)
        // Generation 7 stays open past healthyAfter: the next delay is back under the base.
        _ = machine.tokenReady(generation: 7, token: "t", now: now)
        _ = machine.received([.hello(heartbeatMilliseconds: 60_000)], generation: 7, now: now)
        _ = machine.ended(generation: 7, .closed(code: 1001, reason: "going_away"), now: now + .seconds(10))
        #expect(delay(machine, from: now + .seconds(10))! < .milliseconds(500))
    }

    @Test func aRetryAfterIsAFloorUpToTheCap() {
        var machine = machine(random: 0)
        _ = machine.start(now: t0)
        _ = machine.tokenReady(generation: 1, token: "t", now: t0)
        let refusal = Machine.Ending.refused(status: 429, code: "rate_limited", retryAfter: .seconds(20))
        #expect(
            machine.ended(generation: 1, refusal, now: t0) == [
                .close(1), .emit(.disconnected(reason: "refused 429 rate_limited")),
            ])
        #expect(delay(machine, from: t0) == .seconds(20))
        _ = machine.tick(now: machine.deadline!)
        _ = machine.ended(generation: 2, .refused(status: 429, code: nil, retryAfter: .seconds(3600)), now: at(20))
        #expect(delay(machine, from: at(20)) == .seconds(30))
    }

    // MARK: - Closes

    @Test func tokenExpiredByCodeOrReasonRefreshesTheTokenOnReconnect() {
        for ending in [Machine.Ending.closed(code: 4001, reason: nil), .closed(code: 1003, reason: "token_expired")] {
            var machine = machine()
            opened(&machine)
            #expect(machine.ended(generation: 1, ending, now: at(1)).first == .close(1))
            #expect(machine.tick(now: machine.deadline!) == [.fetchToken(2, forceRefresh: true)])
        }
    }

    @Test func aRefusedTokenIsRefreshedOnTheNextTry() {
        var machine = machine()
        _ = machine.start(now: t0)
        _ = machine.tokenReady(generation: 1, token: "t", now: t0)
        _ = machine.ended(generation: 1, .refused(status: 401, code: "token_expired", retryAfter: nil), now: t0)
        #expect(machine.tick(now: machine.deadline!) == [.fetchToken(2, forceRefresh: true)])
    }

    @Test func signOutAndAccountDeletionEndTheSessionAndNothingReconnects() {
        let cases: [(Machine.Ending, Int)] = [
            (.closed(code: 4003, reason: "session_revoked"), 4003),
            (.closed(code: 1003, reason: "account_deleted"), 4004),
            (.closed(code: 4004, reason: nil), 4004),
            (.refused(status: 401, code: "session_revoked", retryAfter: nil), 4003),
        ]
        for (ending, code) in cases {
            var machine = machine()
            opened(&machine)
            #expect(machine.ended(generation: 1, ending, now: at(1)) == [.close(1), .emit(.sessionEnded(code: code))])
            #expect(machine.deadline == nil && !machine.isRunning)
            #expect(machine.tick(now: at(100)) == [])
            // A start afterwards (a new sign-in) connects afresh.
            #expect(machine.start(now: at(100)) == [.fetchToken(2, forceRefresh: false)])
        }
    }

    @Test func anSSEClosedEventIsHandledAsTheCloseItNames() {
        var machine = machine()
        opened(&machine)
        #expect(
            machine.received([.closed(code: 4003, reason: "session_revoked")], generation: 1, now: at(1)) == [
                .close(1), .emit(.sessionEnded(code: 4003)),
            ])
    }

    @Test func tooSlowGoingAwayAndAnythingElseReconnectWithTheSameToken() {
        for ending in [
            Machine.Ending.closed(code: 4008, reason: "too_slow"), .closed(code: 1001, reason: "going_away"),
            .closed(code: 1011, reason: nil), .failed("the server ended the stream"),
            .refused(status: 503, code: "unavailable", retryAfter: nil),
        ] {
            var machine = machine()
            opened(&machine)
            let actions = machine.ended(generation: 1, ending, now: at(1))
            #expect(actions.count == 2 && actions.first == .close(1), "\(ending)")
            #expect(machine.tick(now: machine.deadline!) == [.fetchToken(2, forceRefresh: false)], "\(ending)")
        }
    }

    // MARK: - Generations

    @Test func whateverAnOlderGenerationReportsIsIgnored() {
        var machine = machine()
        opened(&machine)
        _ = machine.ended(generation: 1, .failed("dropped"), now: at(1))
        _ = machine.tick(now: machine.deadline!)
        _ = machine.tokenReady(generation: 2, token: "t2", now: at(2))
        #expect(machine.received([.hello(heartbeatMilliseconds: 1000)], generation: 1, now: at(2)) == [])
        #expect(machine.received([.cue(tables: ["x"], origin: nil)], generation: 1, now: at(2)) == [])
        #expect(machine.ended(generation: 1, .closed(code: 4003, reason: "session_revoked"), now: at(2)) == [])
        #expect(machine.tokenReady(generation: 1, token: "old", now: at(2)) == [])
        #expect(machine.received([.hello(heartbeatMilliseconds: 1000)], generation: 2, now: at(2)) == [.emit(.opened)])
    }

    // MARK: - Token lifetime

    @Test func onSSEATokenExpiringOpensARenewalThatReplacesTheStreamOnItsHello() {
        var machine = machine()
        opened(&machine)
        #expect(
            machine.received([.tokenExpiring(inMilliseconds: 2000)], generation: 1, now: at(0.5)) == [
                .fetchToken(2, forceRefresh: true)
            ])
        #expect(machine.received([.tokenExpiring(inMilliseconds: 1900)], generation: 1, now: at(0.6)) == [])
        #expect(
            machine.tokenReady(generation: 2, token: "fresh", now: at(0.7)) == [
                .open(2, .serverSentEvents, token: "fresh")
            ])
        // The old stream still serves meanwhile.
        #expect(
            machine.received([.cue(tables: ["a"], origin: nil)], generation: 1, now: at(0.8)) == [
                .emit(.cue(tables: ["a"], origin: nil))
            ])
        #expect(
            machine.received([.hello(heartbeatMilliseconds: 1000)], generation: 2, now: at(0.9)) == [
                .close(1), .emit(.opened),
            ])
        #expect(machine.openGeneration == 2)
        #expect(machine.ended(generation: 1, .closed(code: 4001, reason: "token_expired"), now: at(2)) == [])
    }

    @Test func aRenewalThatFailsIsTriedAgainWhileTheOldStreamLasts() {
        var machine = machine(random: 0.5)
        opened(&machine)
        _ = machine.received([.tokenExpiring(inMilliseconds: 60_000)], generation: 1, now: at(0.1))
        _ = machine.tokenReady(generation: 2, token: "fresh", now: at(0.1))
        #expect(machine.ended(generation: 2, .failed("refused"), now: at(0.2)) == [.close(2)])
        #expect(machine.openGeneration == 1)
        _ = machine.received([], generation: 1, now: at(0.4))
        #expect(machine.deadline == at(0.45))
        #expect(machine.tick(now: at(0.45)) == [.fetchToken(3, forceRefresh: true)])
    }

    @Test func whenTheOldStreamEndsFirstTheRenewalBecomesTheConnectionBeingOpened() {
        var machine = machine()
        opened(&machine)
        _ = machine.received([.tokenExpiring(inMilliseconds: 500)], generation: 1, now: at(0.1))
        _ = machine.tokenReady(generation: 2, token: "fresh", now: at(0.1))
        #expect(
            machine.ended(generation: 1, .closed(code: 4001, reason: "token_expired"), now: at(0.6)) == [
                .close(1), .emit(.disconnected(reason: "closed 4001 token_expired")),
            ])
        #expect(
            machine.received([.hello(heartbeatMilliseconds: 1000)], generation: 2, now: at(0.7)) == [.emit(.opened)])
    }

    @Test func onWebSocketATokenExpiringSendsAnInBandAuthWithAFreshToken() {
        var machine = machine(transport: .webSocket)
        opened(&machine)
        #expect(
            machine.received([.tokenExpiring(inMilliseconds: 2000)], generation: 1, now: at(0.2)) == [
                .fetchToken(1, forceRefresh: true)
            ])
        #expect(machine.tokenReady(generation: 1, token: "fresh", now: at(0.3)) == [.sendAuth(1, token: "fresh")])
        #expect(machine.tokenReady(generation: 1, token: "again", now: at(0.3)) == [], "one auth per warning")
    }

    @Test func aWebSocketPingsEveryHeartbeatSoItsPongFeedsTheWatchdog() {
        var machine = machine(transport: .webSocket)
        opened(&machine)
        #expect(machine.deadline == at(1))
        #expect(machine.tick(now: at(1)) == [.sendPing(1)])
        _ = machine.received([], generation: 1, now: at(1.1))
        #expect(machine.tick(now: at(2)) == [.sendPing(1)])
        #expect(machine.openGeneration == 1)
    }

    @Test func aWebSocketThatFailsBeforeHelloFallsBackToSSEAtOnce() {
        var machine = machine(transport: .webSocket)
        _ = machine.start(now: t0)
        #expect(machine.tokenReady(generation: 1, token: "t", now: t0) == [.open(1, .webSocket, token: "t")])
        #expect(
            machine.ended(generation: 1, .failed("WebSockets not supported"), now: t0) == [
                .close(1), .emit(.disconnected(reason: "WebSockets not supported")),
                .fetchToken(2, forceRefresh: false),
            ])
        #expect(machine.tokenReady(generation: 2, token: "t", now: t0) == [.open(2, .serverSentEvents, token: "t")])
    }

    @Test func withoutFallbackAFailedWebSocketIsRetriedAsAWebSocket() {
        var machine = machine(transport: .webSocket, fallsBack: false)
        _ = machine.start(now: t0)
        _ = machine.tokenReady(generation: 1, token: "t", now: t0)
        _ = machine.ended(generation: 1, .failed("refused"), now: t0)
        _ = machine.tick(now: machine.deadline!)
        #expect(machine.tokenReady(generation: 2, token: "t", now: at(1)) == [.open(2, .webSocket, token: "t")])
    }

    // MARK: - Stop

    @Test func stopClosesEveryLiveConnectionAndWinsOverEverything() {
        var machine = machine()
        opened(&machine)
        _ = machine.received([.tokenExpiring(inMilliseconds: 2000)], generation: 1, now: at(0.5))
        _ = machine.tokenReady(generation: 2, token: "fresh", now: at(0.5))
        #expect(machine.stop() == [.close(1), .close(2)])
        #expect(machine.deadline == nil && !machine.isRunning)
        #expect(machine.received([.hello(heartbeatMilliseconds: 1000)], generation: 2, now: at(1)) == [])
        #expect(machine.received([.cue(tables: [], origin: nil)], generation: 1, now: at(1)) == [])
        #expect(machine.ended(generation: 1, .closed(code: 4003, reason: nil), now: at(1)) == [])
        #expect(machine.tokenFailed(generation: 2, now: at(1)) == [])
        #expect(machine.tick(now: at(100)) == [])
        #expect(machine.stop() == [])
    }

    @Test func stopDuringBackoffLeavesNothingDue() {
        var machine = machine()
        opened(&machine)
        _ = machine.ended(generation: 1, .failed("x"), now: at(1))
        #expect(machine.deadline != nil)
        #expect(machine.stop() == [])
        #expect(machine.deadline == nil)
        #expect(machine.tick(now: at(100)) == [])
    }
}
