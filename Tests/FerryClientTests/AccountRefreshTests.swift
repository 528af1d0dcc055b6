import FerryTestSupport
import Foundation
import Testing

@testable import FerryClient

/// When the client refreshes its session, by the token's lifetime.
@Suite(.tagSelection) struct AccountRefreshTests {
    let issued = Date(timeIntervalSince1970: 1_800_000_000)

    @Test func aLongTokenIsRefreshedATenthOfItsLifetimeBeforeItEnds() {
        let due = Account.refreshDue(issuedAt: issued, expiresAt: issued + 3_600)
        #expect(due == issued + 3_240)
    }

    @Test func aFifteenMinuteTokenIsRefreshedAMinuteAndAHalfBeforeItEnds() {
        #expect(Account.refreshDue(issuedAt: issued, expiresAt: issued + 900) == issued + 810)
    }

    @Test func aShortTokenIsRefreshedAtHalfItsLifetimeNotTheMomentItArrives() {
        // A minute before the end would be the moment a one-minute token is issued.
        #expect(Account.refreshDue(issuedAt: issued, expiresAt: issued + 60) == issued + 30)
        #expect(Account.refreshDue(issuedAt: issued, expiresAt: issued + 100) == issued + 50)
        #expect(Account.refreshDue(issuedAt: issued, expiresAt: issued + 600) == issued + 540)
    }

    @Test func aTokenThatEndsBeforeItBeganIsDueAtOnce() {
        #expect(Account.refreshDue(issuedAt: issued, expiresAt: issued - 10) == issued - 10)
    }
}
