import FerryAuth
import FerryTestSupport
import Synchronization
import Testing

/// A clock a test moves by hand.
final class ManualClock: Sendable {
    private let seconds: Mutex<Double>
    init(_ seconds: Double = 1000) { self.seconds = Mutex(seconds) }
    var now: Double { seconds.withLock { $0 } }
    func advance(_ by: Double) { seconds.withLock { $0 += by } }
}

/// Fixed-window limits per key, with a bounded number of keys.
@Suite(.tagSelection) struct RateLimiterTests {
    let clock = ManualClock()

    func limiter(limit: Int = 3, window: Int = 60, maxKeys: Int = 100) -> RateLimiter {
        let clock = clock
        return RateLimiter(limit: limit, windowSeconds: window, maxKeys: maxKeys, clock: { clock.now })
    }

    @Test func allowsTheLimitThenDeniesWithRetryAfter() {
        let limiter = limiter()
        for _ in 0..<3 { #expect(limiter.admit("10.0.0.1") == .allowed) }
        #expect(limiter.admit("10.0.0.1") == .denied(retryAfterSeconds: 60))
        clock.advance(59.2)
        #expect(limiter.admit("10.0.0.1") == .denied(retryAfterSeconds: 1))
    }

    @Test func aCostCountsThatMuchAndOneLargerThanTheLimitGoesOncePerWindow() {
        let limiter = limiter(limit: 1000, window: 1)
        #expect(limiter.admit("device", cost: 600) == .allowed)
        #expect(limiter.admit("device", cost: 300) == .allowed)
        #expect(limiter.admit("device", cost: 300) == .allowed, "admitted while under the limit, whatever its cost")
        #expect(limiter.admit("device", cost: 1) == .denied(retryAfterSeconds: 1))
        clock.advance(1)
        #expect(limiter.admit("device", cost: 5000) == .allowed, "a fresh window admits one request of any size")
        #expect(limiter.admit("device", cost: 1) != .allowed)
        #expect(limiter.admit("other", cost: .max) == .allowed)
        #expect(limiter.admit("other", cost: .max) != .allowed, "costs add without trapping")
    }

    @Test func resetsAfterTheWindow() {
        let limiter = limiter()
        for _ in 0..<3 { #expect(limiter.admit("10.0.0.1") == .allowed) }
        clock.advance(60)
        for _ in 0..<3 { #expect(limiter.admit("10.0.0.1") == .allowed) }
        #expect(limiter.admit("10.0.0.1") != .allowed)
    }

    @Test func keysAreCountedApart() {
        let limiter = limiter(limit: 1)
        #expect(limiter.admit("10.0.0.1") == .allowed)
        #expect(limiter.admit("10.0.0.2") == .allowed)
        #expect(limiter.admit("ana@example.org") == .allowed)
        #expect(limiter.admit("10.0.0.1") != .allowed)
    }

    @Test func endedWindowsAreForgotten() {
        let limiter = limiter()
        for index in 0..<50 { _ = limiter.admit("10.0.0.\(index)") }
        #expect(limiter.trackedKeys == 50)
        clock.advance(60)
        _ = limiter.admit("10.0.1.1")
        #expect(limiter.trackedKeys == 1)
    }

    @Test func keyCountStaysWithinTheCapByDroppingTheOldest() {
        let limiter = limiter(limit: 1, maxKeys: 10)
        #expect(limiter.admit("first") == .allowed)
        for index in 0..<1000 {
            clock.advance(0.01)
            _ = limiter.admit("flood-\(index)")
            #expect(limiter.trackedKeys <= 10)
        }
        // The oldest window went first, so "first" starts afresh; the newest are still limited.
        #expect(limiter.admit("first") == .allowed)
        #expect(limiter.admit("flood-999") != .allowed)
    }
}
