import Dispatch
import FerryTestSupport
import Testing

@testable import FerryAuth

/// Counts held per key, with a limit per key, shared by every thread.
@Suite(.tagSelection) struct ConcurrencyLimitTests {
    @Test func takesUpToTheLimitThenRefusesUntilOneIsReleased() {
        let limit = ConcurrencyLimit<String>(limit: 2)
        #expect(limit.take("device"))
        #expect(limit.take("device"))
        #expect(!limit.take("device"))
        #expect(limit.count("device") == 2, "a refusal counts nothing")
        limit.release("device")
        #expect(limit.take("device"))
    }

    @Test func keysAreCountedApart() {
        let limit = ConcurrencyLimit<String>(limit: 1)
        #expect(limit.take("a"))
        #expect(!limit.take("a"))
        #expect(limit.take("b"))
    }

    @Test func aKeyHoldingNothingIsForgotten() {
        let limit = ConcurrencyLimit<Int>(limit: 3)
        for key in 0..<100 {
            #expect(limit.take(key))
            #expect(limit.take(key))
        }
        #expect(limit.keysHolding == 100)
        for key in 0..<100 {
            limit.release(key)
            limit.release(key)
        }
        #expect(limit.keysHolding == 0)
    }

    @Test func takesAndReleasesFromManyThreadsBalance() {
        let limit = ConcurrencyLimit<String>(limit: 1_000_000)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<10_000 {
                #expect(limit.take("user"))
                limit.release("user")
            }
        }
        #expect(limit.count("user") == 0)
        #expect(limit.keysHolding == 0)
    }
}
