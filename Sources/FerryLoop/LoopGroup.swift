import Foundation

/// A fixed set of event loops, one thread each (by default one per core).
public final class LoopGroup: Sendable {
    /// The loops, each already running on its own thread.
    public let loops: [EventLoop]

    /// Starts `count` loops named `loop-0` … `loop-N`.
    public init(count: Int = ProcessInfo.processInfo.activeProcessorCount) {
        precondition(count > 0, "a loop group needs at least one loop")
        loops = (0..<count).map { EventLoop.spawn(name: "loop-\($0)") }
    }

    /// Runs `body` on every loop (each on its own thread) and waits until all return.
    public func onEveryLoop(_ body: @escaping @Sendable (EventLoop) -> Void) {
        let group = DispatchGroup()
        for loop in loops {
            group.enter()
            loop.execute {
                body(loop)
                group.leave()
            }
        }
        group.wait()
    }

    /// Stops every loop. Safe from any thread; work already queued still runs.
    public func stop() {
        for loop in loops { loop.stop() }
    }

    /// Stops every loop and waits until each has closed its handles and returned.
    /// Call it off the group's loops.
    public func stopAndWait() {
        stop()
        for loop in loops { loop.waitUntilStopped() }
    }
}
