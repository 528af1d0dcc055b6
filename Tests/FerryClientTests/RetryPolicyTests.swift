import Foundation
import Testing

@testable import FerryClient

/// When the drain and pull try again, without a gateway: the backoff's bounds and which
/// failures arm the timer.
@Suite struct RetryPolicyTests {
    /// An error answer as the client reads it: retryable by the policy of its status.
    func server(_ status: Int) -> FerryError {
        .server(
            ServerError(
                status: status, code: "c", message: "m", retryable: RetryPolicy.isRetryable(status: status, flag: nil),
                details: [:]))
    }

    @Test func aWaitIsAtMostTheDoubledBaseUpToTheCapAndAtLeastRetryAfter() {
        let policy = RetryPolicy(base: 0.5, cap: 4)
        for failures in 0..<12 {
            let ceiling = min(4, 0.5 * pow(2, Double(failures)))
            #expect((0...ceiling).contains(policy.delay(afterFailures: failures)))
        }
        #expect(policy.delay(afterFailures: 0, retryAfter: 7) == 7)
        // A count past any real one neither traps nor grows past the cap.
        #expect(policy.delay(afterFailures: .max) <= 4)
    }

    @Test func noAnswer5xxAnd429AreRetryableAndFinalAnswersAreNot() {
        #expect(RetryPolicy.isRetryable(status: 503, flag: nil))
        #expect(RetryPolicy.isRetryable(status: 429, flag: false))
        #expect(RetryPolicy.isRetryable(status: 409, flag: true))
        #expect(!RetryPolicy.isRetryable(status: 400, flag: nil))
        #expect(!RetryPolicy.isRetryable(status: 401, flag: false))
    }

    /// A pass that left the outbox as it was is tried again by the timer, whatever the
    /// failure of the moment; only a lost session (or a final answer) stops the drain.
    @Test func everyFailureOfTheMomentArmsTheTimerAndALostSessionDoesNot() {
        for error: FerryError in [
            .unreachable("refused"), server(503), server(429), server(401), .invalidAnswer("an HTML page"),
            .storage("busy"), .sessionUnreadable("locked"),
        ] {
            #expect(SyncEngine.isRetriedLater(error), "\(error)")
        }
        for error: FerryError in [.signedOut, server(400), server(403), .outboxNotEmpty(pending: 1)] {
            #expect(!SyncEngine.isRetriedLater(error), "\(error)")
        }
    }
}
