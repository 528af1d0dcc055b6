import FerryLoop
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
}
