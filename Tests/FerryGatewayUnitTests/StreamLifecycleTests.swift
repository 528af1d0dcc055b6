import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// ``StreamLifecycle`` without a socket: the clocks and the unsent bytes are the test's.
@Suite(.tagSelection) struct StreamLifecycleTests {
    typealias Machine = StreamLifecycle
    let user = UUID()
    let session = UUID()
    /// One-second heartbeats, a minute's token warning, 100 unsent bytes at most.
    let policy = StreamPolicy(heartbeatMilliseconds: 1_000, tokenWarningSeconds: 60, maxUnsentBytes: 100)
    /// When the stream opens: loop millisecond 10,000 and a wall second.
    let start = Machine.Instant(loopMilliseconds: 10_000, wallMilliseconds: 1_700_000_000_000)

    /// `milliseconds` after ``start`` on both clocks.
    func after(_ milliseconds: Int) -> Machine.Instant {
        Machine.Instant(
            loopMilliseconds: start.loopMilliseconds + UInt64(milliseconds),
            wallMilliseconds: start.wallMilliseconds + milliseconds)
    }

    /// A machine whose token is refused from `seconds` after ``start`` on.
    func machine(tokenEndsIn seconds: Int = 3_600) -> Machine {
        Machine(policy: policy, userID: user, sessionID: session, expiresAt: start.wallMilliseconds / 1000 + seconds)
    }

    /// A machine opened at ``start`` whose token ends in an hour.
    func openedMachine() -> Machine {
        var machine = machine()
        #expect(machine.opened(now: start) == .send([.hello(heartbeatMilliseconds: 1_000)], thenWakeAt: 11_000))
        return machine
    }

    // MARK: - Opening

    @Test func anOpenedStreamSaysHelloAndWakesAtItsFirstHeartbeat() {
        let machine = openedMachine()
        #expect(machine.isOpen)
        #expect(machine.state == .open)
        #expect(machine.nextHeartbeat == 11_000)
    }

    @Test func aTokenWithinItsWarningIsWarnedWithTheHelloAndWakesAtItsEndIfSooner() {
        var machine = Machine(
            policy: StreamPolicy(heartbeatMilliseconds: 60_000, tokenWarningSeconds: 60, maxUnsentBytes: 100),
            userID: user, sessionID: session, expiresAt: start.wallMilliseconds / 1000 + 30)
        #expect(
            machine.opened(now: start)
                == .send(
                    [.hello(heartbeatMilliseconds: 60_000), .tokenExpiring(inMilliseconds: 30_000)],
                    thenWakeAt: 40_000))
        #expect(machine.hasWarned)
    }

    @Test func aTokenAlreadyOverSaysHelloThenCloses4001() {
        var machine = machine(tokenEndsIn: 0)
        #expect(machine.opened(now: start) == .sendAndClose([.hello(heartbeatMilliseconds: 1_000)], .tokenExpired))
        #expect(machine.state == .closing(.tokenExpired))
        #expect(!machine.isOpen)
    }

    // MARK: - Heartbeats

    @Test func aDueHeartbeatIsSentAndTheNextOneIsAHeartbeatLater() {
        var machine = openedMachine()
        #expect(machine.deadlineReached(now: after(1_000), unsentBytes: 0) == .send([.heartbeat], thenWakeAt: 12_000))
        // Woken late, the next heartbeat counts from now.
        #expect(machine.deadlineReached(now: after(2_300), unsentBytes: 0) == .send([.heartbeat], thenWakeAt: 13_300))
    }

    @Test func aDeadlineBeforeTheHeartbeatSendsNothing() {
        var machine = openedMachine()
        #expect(machine.deadlineReached(now: after(400), unsentBytes: 0) == .send([], thenWakeAt: 11_000))
    }

    @Test func anUnansweredPingCloses4008Once() {
        var machine = openedMachine()
        _ = machine.deadlineReached(now: after(1_000), unsentBytes: 0)
        #expect(machine.heartbeatUnanswered() == .close(.tooSlow))
        #expect(machine.heartbeatUnanswered() == .none)
        #expect(machine.deadlineReached(now: after(2_000), unsentBytes: 0) == .none)
    }

    @Test func bytesWaitingAtTwoHeartbeatsWithNothingTakenBetweenClose4008() {
        var machine = openedMachine()
        // A stalled stream is not pinged.
        #expect(machine.deadlineReached(now: after(1_000), unsentBytes: 50) == .send([], thenWakeAt: 12_000))
        #expect(machine.deadlineReached(now: after(2_000), unsentBytes: 50) == .close(.tooSlow))
        #expect(machine.state == .closing(.tooSlow))
    }

    @Test func aStreamThatTookBytesBetweenTwoStalledHeartbeatsStaysOpen() {
        var machine = openedMachine()
        _ = machine.deadlineReached(now: after(1_000), unsentBytes: 50)
        machine.drained()
        #expect(machine.deadlineReached(now: after(2_000), unsentBytes: 50) == .send([], thenWakeAt: 13_000))
        // Not drained since: the third stalled heartbeat closes it.
        #expect(machine.deadlineReached(now: after(3_000), unsentBytes: 50) == .close(.tooSlow))
    }

    @Test func aStallBetweenTwoHeartbeatsThatClearedIsNoStall() {
        var machine = openedMachine()
        _ = machine.deadlineReached(now: after(1_000), unsentBytes: 50)
        #expect(machine.deadlineReached(now: after(2_000), unsentBytes: 0) == .send([.heartbeat], thenWakeAt: 13_000))
        #expect(machine.deadlineReached(now: after(3_000), unsentBytes: 50) == .send([], thenWakeAt: 14_000))
    }

    @Test func aWarningDueWithAStallIsSentBeforeTheClose() {
        // The warning is due at 2 s, the second stalled heartbeat's moment.
        var machine = machine(tokenEndsIn: 62)
        #expect(machine.opened(now: start) == .send([.hello(heartbeatMilliseconds: 1_000)], thenWakeAt: 11_000))
        #expect(machine.deadlineReached(now: after(1_000), unsentBytes: 50) == .send([], thenWakeAt: 12_000))
        #expect(
            machine.deadlineReached(now: after(2_000), unsentBytes: 50)
                == .sendAndClose([.tokenExpiring(inMilliseconds: 60_000)], .tooSlow))
    }

    // MARK: - The token's end

    @Test func theTokenIsWarnedOnceAtItsWarningThenClosed4001AtItsEnd() {
        var machine = Machine(
            policy: StreamPolicy(heartbeatMilliseconds: 3_600_000, tokenWarningSeconds: 60, maxUnsentBytes: 100),
            userID: user, sessionID: session, expiresAt: start.wallMilliseconds / 1000 + 90)
        #expect(machine.opened(now: start) == .send([.hello(heartbeatMilliseconds: 3_600_000)], thenWakeAt: 40_000))
        #expect(
            machine.deadlineReached(now: after(30_000), unsentBytes: 0)
                == .send([.tokenExpiring(inMilliseconds: 60_000)], thenWakeAt: 100_000))
        #expect(machine.deadlineReached(now: after(60_000), unsentBytes: 0) == .send([], thenWakeAt: 100_000))
        #expect(machine.deadlineReached(now: after(90_000), unsentBytes: 0) == .close(.tokenExpired))
        #expect(machine.deadlineReached(now: after(91_000), unsentBytes: 0) == .none)
    }

    @Test func theEndIsReadOnTheWallClockWhateverTheLoopSays() {
        var machine = openedMachine()
        // The loop's clock stood still for an hour (a suspended machine): the token is over.
        let resumed = Machine.Instant(loopMilliseconds: 10_500, wallMilliseconds: after(3_600_000).wallMilliseconds)
        #expect(machine.deadlineReached(now: resumed, unsentBytes: 0) == .close(.tokenExpired))
    }

    @Test func anEndFarInTheFutureDoesNotOverflow() {
        var machine = Machine(policy: policy, userID: user, sessionID: session, expiresAt: .max)
        #expect(machine.opened(now: start) == .send([.hello(heartbeatMilliseconds: 1_000)], thenWakeAt: 11_000))
    }

    @Test func aRenewedTokenLivesToItsOwnEndAndIsWarnedAgain() {
        var machine = machine(tokenEndsIn: 30)
        _ = machine.opened(now: start)
        #expect(machine.hasWarned)
        let next = UUID()
        let renewed = machine.tokenRenewed(
            sessionID: next, expiresAt: start.wallMilliseconds / 1000 + 120, now: after(500), unsentBytes: 0)
        #expect(renewed == .send([], thenWakeAt: 11_000))
        #expect(!machine.hasWarned)
        #expect(machine.sessionID == next)
        // Past the first token's end, open; warned a minute before the second's.
        #expect(machine.deadlineReached(now: after(31_000), unsentBytes: 0) == .send([.heartbeat], thenWakeAt: 42_000))
        let warned = machine.deadlineReached(now: after(60_000), unsentBytes: 0)
        #expect(warned == .send([.tokenExpiring(inMilliseconds: 60_000), .heartbeat], thenWakeAt: 71_000))
    }

    @Test func aTokenRenewedAfterTheCloseChangesNothing() {
        var machine = openedMachine()
        #expect(machine.shutdown() == .close(.goingAway))
        let renewed = machine.tokenRenewed(
            sessionID: UUID(), expiresAt: start.wallMilliseconds / 1000 + 120, now: after(500), unsentBytes: 0)
        #expect(renewed == .none)
        #expect(machine.sessionID == session)
    }

    // MARK: - Other ends

    @Test func aCueLeavingMoreThanTheBoundUnsentCloses4008() {
        var machine = openedMachine()
        #expect(machine.cueSent(unsentBytes: 100) == .none)
        #expect(machine.cueSent(unsentBytes: 101) == .close(.tooSlow))
        #expect(machine.cueSent(unsentBytes: 1_000) == .none)
    }

    @Test func aSignOutClosesItsSessionsStreams4003AndNoOther() {
        var mine = openedMachine()
        #expect(mine.revoked(Revocation(sessionID: UUID(), userID: user, reason: .signedOut)) == .none)
        #expect(mine.revoked(Revocation(sessionID: session, userID: UUID(), reason: .signedOut)) == .none)
        #expect(
            mine.revoked(Revocation(sessionID: session, userID: user, reason: .signedOut)) == .close(.sessionRevoked))
        var reused = openedMachine()
        #expect(
            reused.revoked(Revocation(sessionID: session, userID: nil, reason: .tokenReused)) == .close(.sessionRevoked)
        )
        var unknownReason = openedMachine()
        #expect(
            unknownReason.revoked(Revocation(sessionID: session, userID: nil, reason: nil)) == .close(.sessionRevoked))
    }

    @Test func aDeletedAccountClosesEveryStreamOfItsUser4004() {
        var otherSession = openedMachine()
        let deletion = Revocation(sessionID: UUID(), userID: user, reason: .accountDeleted)
        #expect(otherSession.revoked(deletion) == .close(.accountDeleted))
        var otherUser = Machine(policy: policy, userID: UUID(), sessionID: session, expiresAt: .max)
        _ = otherUser.opened(now: start)
        #expect(otherUser.revoked(Revocation(sessionID: session, userID: UUID(), reason: .accountDeleted)) == .none)
        // Without its user, a deletion reaches its own session only.
        var named = openedMachine()
        #expect(named.revoked(Revocation(sessionID: UUID(), userID: nil, reason: .accountDeleted)) == .none)
        #expect(
            named.revoked(Revocation(sessionID: session, userID: nil, reason: .accountDeleted))
                == .close(.accountDeleted))
    }

    @Test func theFirstCloseWinsAndTheTransportsReportEndsIt() {
        var machine = openedMachine()
        #expect(
            machine.close(.policyViolation("the access token is not valid"))
                == .close(.policyViolation("the access token is not valid")))
        #expect(machine.shutdown() == .none)
        #expect(machine.revoked(Revocation(sessionID: session, userID: user, reason: .signedOut)) == .none)
        #expect(machine.cueSent(unsentBytes: 1_000) == .none)
        #expect(machine.state == .closing(.policyViolation("the access token is not valid")))
        machine.closed()
        #expect(machine.state == .closed)
        #expect(machine.deadlineReached(now: after(1_000), unsentBytes: 0) == .none)
        #expect(machine.shutdown() == .none)
    }

    @Test func aStreamTheClientClosedTakesNoClose() {
        var machine = openedMachine()
        machine.closed()
        #expect(!machine.isOpen)
        #expect(machine.heartbeatUnanswered() == .none)
        #expect(machine.close(.goingAway) == .none)
    }
}
