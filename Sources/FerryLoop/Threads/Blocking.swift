import Dispatch

/// Runs async work from a synchronous command (``Command/run(_:)``) and waits for it
/// on the calling thread, which is not one of the concurrency pool's threads.
func runBlocking<Value: Sendable>(_ body: @escaping @Sendable () async throws -> Value) throws -> Value {
    let outcome = Outcome<Value>()
    let finished = DispatchSemaphore(value: 0)
    Task {
        do {
            outcome.result = .success(try await body())
        } catch {
            outcome.result = .failure(error)
        }
        finished.signal()
    }
    finished.wait()
    return try outcome.result!.get()
}

/// The result handed from the task to the waiting thread. Unchecked: the task writes
/// it once before `signal()`, the thread reads it after `wait()`; the semaphore orders them.
private final class Outcome<Value>: @unchecked Sendable {
    var result: Result<Value, any Error>?
}
