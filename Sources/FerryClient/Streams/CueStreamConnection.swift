import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// What one connection of a ``CueStream`` reports, in the order it happened.
enum CueStreamConnectionEvent: Sendable {
    /// Bytes arrived (a heartbeat, a pong among them), completing these messages.
    case received([CueStreamMessage])
    /// The connection is over; nothing follows.
    case ended(CueStreamStateMachine.Ending)
}

/// One transport connection of a ``CueStream``: SSE everywhere, WebSocket on Apple
/// platforms. It reports through the `report` closure it was made with, from its
/// URLSession's serial delegate queue, and owns that session: ``close()`` invalidates it.
protocol CueStreamConnection: AnyObject, Sendable {
    /// Sends the request.
    func start()
    /// Cancels the request and invalidates the session; no report follows that matters
    /// (the stream has moved on to another generation). Idempotent.
    func close()
    /// WebSocket: sends an in-band `auth` with `token`; SSE cannot (a no-op).
    func sendAuth(_ token: String)
    /// WebSocket: sends a ping whose pong counts as bytes received; SSE: a no-op.
    func sendPing()
    /// Returns once the session let go of the connection (after ``close()``), or after
    /// `timeout` if it never says so.
    func finished(timeout: Duration) async
    /// Whether the session still holds the connection (``finished(timeout:)`` would wait).
    var isAlive: Bool { get }
}

/// The request both transports send: the token in `Authorization`, never in the URL
/// (where proxies and logs would keep it), nothing cached.
func cueStreamRequest(_ url: URL, token: String, timeout: Duration) -> URLRequest {
    var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: seconds(timeout))
    request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
    return request
}

/// A URLSession for one connection, with `delegate` called on a serial queue of its own.
/// Its request timeout is an idle timeout (re-armed by every byte): a long one, as the
/// stream's own watchdog decides when a silent connection is dead.
func cueStreamSession(delegate: any URLSessionDelegate, idleTimeout: Duration) -> URLSession {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.timeoutIntervalForRequest = seconds(idleTimeout)
    configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
    configuration.urlCache = nil
    configuration.httpCookieStorage = nil
    let queue = OperationQueue()
    queue.maxConcurrentOperationCount = 1
    queue.name = "FerryClient.CueStream"
    return URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue)
}

/// `duration` in seconds, as Foundation counts time.
func seconds(_ duration: Duration) -> TimeInterval {
    let (whole, attoseconds) = duration.components
    return TimeInterval(whole) + TimeInterval(attoseconds) / 1e18
}

/// Resumes the waiters of ``CueStreamConnection/finished(timeout:)`` once, whichever of
/// the session's goodbye or the timeout comes first.
final class FinishSignal: Sendable {
    private let state = LockedValue<(done: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    /// Whether ``fire()`` was called.
    var isDone: Bool { state.withLock { $0.done } }

    /// Marks the connection finished and resumes every waiter.
    func fire() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.done = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Waits for ``fire()``, at most `timeout`.
    func wait(timeout: Duration) async {
        let timer = Task {
            try? await Task.sleep(for: timeout)
            fire()
        }
        await withCheckedContinuation { continuation in
            let resumeNow = state.withLock { state -> Bool in
                if state.done { return true }
                state.waiters.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
        timer.cancel()
    }
}

/// A value behind an `NSLock`: Synchronization's `Mutex` needs iOS 18, and FerryClient
/// supports iOS 17.
final class LockedValue<Value: Sendable>: @unchecked Sendable {
    // Sendable because `value` is only read or written inside `lock`, and
    // `withLock`'s body cannot let an inout reference escape.
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    /// Runs `body` with the value, under the lock.
    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
