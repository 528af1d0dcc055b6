import Foundation
import Synchronization

/// A few threads of their own for work that must never run on an event loop
/// (password hashing: tens of milliseconds of CPU and 64 MiB each), with a bounded
/// queue so an overload is refused at once instead of piling up.
///
/// ``submit(_:)`` is safe from any thread and never blocks. Jobs run in order of
/// submission, at most `threads` at a time. Threads live until ``close()``.
public final class BlockingWorkerPool: Sendable {
    private struct State {
        var jobs: [@Sendable () -> Void] = []
        var isClosed = false
    }

    /// Jobs that may wait for a thread; a submission beyond this is refused.
    public let queueLimit: Int
    private let state = Mutex(State())
    /// Counts queued jobs plus, after ``close()``, one wake-up per thread to exit.
    private let wakeups = DispatchSemaphore(value: 0)
    private let threadCount: Int

    /// Starts `threads` threads named `name-0`, `name-1`, ….
    public init(name: String, threads: Int, queueLimit: Int) {
        precondition(threads > 0 && queueLimit >= 0, "a worker pool needs a thread and a non-negative queue limit")
        self.queueLimit = queueLimit
        self.threadCount = threads
        for index in 0..<threads {
            let thread = Thread { [self] in runJobs() }
            thread.name = "\(name)-\(index)"
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    /// Queues `job` to run on a worker thread; false, at once, when `queueLimit`
    /// jobs are already waiting or the pool is closed.
    public func submit(_ job: @escaping @Sendable () -> Void) -> Bool {
        let accepted = state.withLock { state -> Bool in
            guard !state.isClosed, state.jobs.count < queueLimit else { return false }
            state.jobs.append(job)
            return true
        }
        if accepted { wakeups.signal() }
        return accepted
    }

    /// Refuses new jobs; the threads finish the queued ones, then exit. Does not wait.
    public func close() {
        let wasClosed = state.withLock { state in
            defer { state.isClosed = true }
            return state.isClosed
        }
        guard !wasClosed else { return }
        for _ in 0..<threadCount { wakeups.signal() }
    }

    private func runJobs() {
        while true {
            wakeups.wait()
            let next = state.withLock { state -> (job: (@Sendable () -> Void)?, exit: Bool) in
                if !state.jobs.isEmpty { return (state.jobs.removeFirst(), false) }
                return (nil, state.isClosed)
            }
            if let job = next.job { job() } else if next.exit { return }
        }
    }
}
