import FerryLoop
import Testing

struct LoopBoundTests {
    /// Not `Sendable`: only a `LoopBound` lets it cross to the loop.
    final class Counter {
        var count = 0
    }

    @Test func aValueHandedOverFromAnotherThreadIsUsedOnItsLoop() {
        let loop = EventLoop.spawn(name: "loop-bound")
        defer { loop.stop() }
        let bound = LoopBound(sending: Counter(), loop: loop)
        let (onLoop, count) = loop.runAndWait {
            bound.value.count += 1
            return (loop.inEventLoop, bound.value.count)
        }
        #expect(onLoop)
        #expect(count == 1)
    }

    @Test func aValueWrappedOnItsLoopStaysUsableThere() {
        let loop = EventLoop.spawn(name: "loop-bound")
        defer { loop.stop() }
        let bound = loop.runAndWait {
            let counter = Counter()
            counter.count = 41
            let bound = LoopBound(counter, loop: loop)
            counter.count += 1
            return bound
        }
        #expect(loop.runAndWait { bound.value.count } == 42)
    }

    @Test func readingTheValueOffItsLoopTraps() async {
        await #expect(processExitsWith: .failure) {
            let loop = EventLoop.spawn(name: "loop-bound")
            let bound = LoopBound(sending: Counter(), loop: loop)
            _ = bound.value.count
        }
    }

    @Test func wrappingAValueOffTheLoopWithoutHandingItOverTraps() async {
        await #expect(processExitsWith: .failure) {
            let loop = EventLoop.spawn(name: "loop-bound")
            _ = LoopBound(Counter(), loop: loop)
        }
    }
}
