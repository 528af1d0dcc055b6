import FerryAuth
import FerryTestSupport
import Foundation
import Synchronization
import Testing

/// The per-process set of revoked sessions.
@Suite(.tagSelection) struct RevokedSessionsTests {
    final class WallClock: Sendable {
        let seconds = Mutex(1_750_000_000)
        var now: Int { seconds.withLock { $0 } }
        func advance(_ by: Int) { seconds.withLock { $0 += by } }
    }

    let clock = WallClock()
    var sessions: RevokedSessions {
        let clock = clock
        return RevokedSessions(clock: { clock.now })
    }

    @Test func revokedSessionIsRevokedUntilItsTokensExpire() {
        let sessions = sessions
        let id = UUID()
        #expect(!sessions.isRevoked(id))
        sessions.revoke(id, until: clock.now + 3630)
        #expect(sessions.isRevoked(id))
        #expect(!sessions.isRevoked(UUID()))
        clock.advance(3630)
        #expect(sessions.isRevoked(id))
        clock.advance(1)
        #expect(!sessions.isRevoked(id))
    }

    @Test func laterRevocationKeepsTheLongerExpiry() {
        let sessions = sessions
        let id = UUID()
        sessions.revoke(id, until: clock.now + 100)
        sessions.revoke(id, until: clock.now + 10)
        clock.advance(50)
        #expect(sessions.isRevoked(id))
    }

    @Test func endedEntriesAreSweptAsTheSetGrows() {
        let sessions = sessions
        for _ in 0..<1000 { sessions.revoke(UUID(), until: clock.now + 10) }
        clock.advance(11)
        for _ in 0..<100 { sessions.revoke(UUID(), until: clock.now + 10) }
        #expect(sessions.count < 1000)
    }

    @Test func replaceAllKeepsOnlyTheGivenLiveSessions() {
        let sessions = sessions
        let dropped = UUID()
        let kept = UUID()
        let ended = UUID()
        sessions.revoke(dropped, until: clock.now + 100)
        sessions.replaceAll(with: [(kept, clock.now + 100), (ended, clock.now - 1)])
        #expect(!sessions.isRevoked(dropped))
        #expect(sessions.isRevoked(kept))
        #expect(!sessions.isRevoked(ended))
        #expect(sessions.count == 1)
    }

    @Test func signerSaysHowLongToRememberASession() {
        let signer = AccessTokenSigner(
            secret: String(repeating: "s", count: 32), lifetimeSeconds: 3600, leewaySeconds: 30)
        #expect(signer.lastAcceptedSecond(issuedAt: 1000) == 4630)
    }
}
