import FerryLoop
import FerryTestSupport
import Foundation
import Synchronization

/// A test waited longer than its bound.
struct TimedOut: Error, CustomStringConvertible {
    let description: String
}

/// Resumes a continuation once, whoever comes first: the loop or the timeout.
private final class Once<T: Sendable>: Sendable {
    let continuation: Mutex<CheckedContinuation<T, Error>?>
    init(_ continuation: CheckedContinuation<T, Error>) { self.continuation = Mutex(continuation) }
    func resume(_ result: Result<T, Error>) {
        continuation.withLock { pending in
            pending?.resume(with: result)
            pending = nil
        }
    }
}

/// Runs `body` on `loop` and waits (at most `seconds`) until it calls `done` with a value.
func onLoop<T: Sendable>(
    _ loop: EventLoop, seconds: Double = 20, _ what: String = #function,
    _ body: @escaping @Sendable (_ done: @escaping @Sendable (T) -> Void) -> Void
) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let once = Once(continuation)
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            once.resume(.failure(TimedOut(description: "\(what) did not finish within \(seconds) s")))
        }
        loop.execute { body { once.resume(.success($0)) } }
    }
}

/// Polls `condition` on `loop` (``eventually(_:seconds:_:)``) until it holds, for at most `seconds`.
func waitUntil(
    _ loop: EventLoop, seconds: Double = 20, _ what: String,
    _ condition: @escaping @Sendable () -> Bool
) async throws {
    try await eventually(what, seconds: seconds) {
        try await onLoop(loop, seconds: seconds) { done in done(condition()) }
    }
}

/// A loop thread for one test, stopped when the test ends.
func withLoop<T>(_ body: (EventLoop) async throws -> T) async throws -> T {
    let loop = EventLoop.spawn(name: "test-loop")
    defer { loop.stop() }
    return try await body(loop)
}
