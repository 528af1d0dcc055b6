import Dispatch

/// A value that one thread (a loop, a task, a worker thread) hands to another thread
/// blocked waiting for it: how a command, a test or the gateway's start waits for work
/// done elsewhere.
///
/// Unchecked-Sendable: the value is written once before the semaphore is signalled and
/// read only after the wait returns, so the semaphore orders the two.
public final class BlockingHandoff<Value>: @unchecked Sendable {
    private var value: Value?
    private let handed = DispatchSemaphore(value: 0)

    /// An empty hand-off.
    public init() {}

    /// Hands `value` to the waiting thread. Call it once.
    public func hand(_ value: Value) {
        self.value = value
        handed.signal()
    }

    /// Blocks until a value is handed over and returns it, or nil once `timeout` has
    /// passed (no timeout: waits as long as it takes).
    public func wait(timeout: Duration? = nil) -> Value? {
        if let timeout {
            let (seconds, attoseconds) = timeout.components
            let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
            guard handed.wait(timeout: .now() + .nanoseconds(nanoseconds)) == .success else { return nil }
        } else {
            handed.wait()
        }
        return value
    }
}

extension EventLoop {
    /// Runs `body` on this loop and returns its result, blocking the calling thread until
    /// it has run. Call it off the loop, which would otherwise wait for itself.
    public func runAndWait<Value>(_ body: @escaping @Sendable () -> Value) -> Value {
        precondition(!inEventLoop, "runAndWait on the loop's own thread would never return")
        let handoff = BlockingHandoff<Value>()
        execute { handoff.hand(body()) }
        return handoff.wait()!
    }

    /// Runs `body` on this loop and blocks the calling thread until `body` hands its
    /// callback a value (at once, or later from another of the loop's callbacks);
    /// returns that value, or nil once `timeout` has passed. Call it off the loop,
    /// which would otherwise wait for itself.
    public func waitForCallback<Value>(
        timeout: Duration? = nil, _ body: @escaping @Sendable (@escaping (Value) -> Void) -> Void
    ) -> Value? {
        precondition(!inEventLoop, "waitForCallback on the loop's own thread would never return")
        let handoff = BlockingHandoff<Value>()
        execute { body(handoff.hand) }
        return handoff.wait(timeout: timeout)
    }
}

/// Runs async work from synchronous code (a command's `run`, `ferry serve` stopping
/// before it served) and blocks the calling thread, which must not be one of the
/// concurrency pool's threads, until it is done.
public func runBlocking<Value: Sendable>(_ body: @escaping @Sendable () async throws -> Value) throws -> Value {
    let handoff = BlockingHandoff<Result<Value, any Error>>()
    Task {
        do {
            handoff.hand(.success(try await body()))
        } catch {
            handoff.hand(.failure(error))
        }
    }
    return try handoff.wait()!.get()
}
