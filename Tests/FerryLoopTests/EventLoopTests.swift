import FerryLoop
import Synchronization
import Testing

struct EventLoopTests {
    /// The body runs on the loop's thread, and its value comes back to the caller.
    @Test func runAndWaitRunsOnTheLoopAndReturnsItsValue() {
        let loop = EventLoop.spawn(name: "run-and-wait")
        defer { loop.stop() }
        #expect(!loop.inEventLoop)
        let (onLoop, value) = loop.runAndWait { (loop.inEventLoop, 6 * 7) }
        #expect(onLoop)
        #expect(value == 42)
    }

    /// A thread that hands a stopped loop work (a password hash finishing after a
    /// shutdown) is not run and does not bring the process down: libuv aborts on a wake-up
    /// sent to a loop it has closed.
    @Test func workHandedToAStoppedLoopIsDroppedAndStopIsIdempotent() {
        let loop = EventLoop.spawn(name: "stopped")
        let ran = Mutex(0)
        loop.execute { ran.withLock { $0 += 1 } }
        loop.stop()
        loop.waitUntilStopped()
        #expect(ran.withLock { $0 } == 1, "work queued before stop runs")
        for _ in 0..<100 { loop.execute { ran.withLock { $0 += 1 } } }
        loop.stop()
        #expect(ran.withLock { $0 } == 1, "work handed over after the loop stopped is dropped")
    }
}
