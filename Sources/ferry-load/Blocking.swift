import Dispatch
import FerryLoop

/// What a loop hands back to a waiting thread. Unchecked: the loop writes it before
/// `signal()`, the thread reads it after `wait()`; the semaphore orders them.
private final class Handoff<Value>: @unchecked Sendable {
    var value: Value?
    var body: ((@escaping (Value) -> Void) -> Void)?
    init(_ body: @escaping (@escaping (Value) -> Void) -> Void) { self.body = body }
}

/// Runs `body` on `loop` and waits for the value it hands to its callback; nil after
/// `timeoutSeconds`. Call it off the loop.
func waitOnLoop<Value>(
    _ loop: EventLoop, timeoutSeconds: Double? = nil, _ body: @escaping (@escaping (Value) -> Void) -> Void
) -> Value? {
    let handoff = Handoff(body)
    let done = DispatchSemaphore(value: 0)
    loop.execute {
        let body = handoff.body!
        handoff.body = nil
        body { value in
            handoff.value = value
            done.signal()
        }
    }
    if let timeoutSeconds {
        guard done.wait(timeout: .now() + timeoutSeconds) == .success else { return nil }
    } else {
        done.wait()
    }
    return handoff.value
}

/// Runs `body` on `loop` and returns its result. Call it off the loop.
func onLoop<Value>(_ loop: EventLoop, _ body: @escaping () -> Value) -> Value {
    waitOnLoop(loop) { done in done(body()) }!
}
