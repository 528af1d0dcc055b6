import CLibUV
import Foundation
import Synchronization

/// One libuv loop bound to one thread.
///
/// Everything a loop owns (handles, connections, pools) is touched only on that
/// loop's thread. Other threads reach the loop through ``execute(_:)``, which
/// queues the closure behind one lock and wakes the loop with `uv_async_send`;
/// the loop drains the whole queue in one callback. Once the loop has stopped, what
/// other threads still hand it is dropped: a hasher or mail thread that finishes after
/// a shutdown has nothing left to run on.
public final class EventLoop: @unchecked Sendable {
    /// The libuv loop. Only for handle wrappers in Ferry's own modules, on the loop thread.
    package let uv: UnsafeMutablePointer<uv_loop_t>
    /// A human-readable name (`loop-0`, …), used for the thread name and in logs.
    public let name: String

    private let wakeup: UnsafeMutablePointer<uv_async_t>
    private let pending = Mutex<PendingWork>(PendingWork())
    private let threadID = Atomic<UInt>(0)
    private var isTornDown = false
    /// Signalled once ``run()`` has returned and the loop is released.
    private let finished = DispatchSemaphore(value: 0)
    /// A scratch buffer for reads: callbacks on one loop never overlap, so every
    /// connection of the loop can share it (64 KiB per loop, not per connection).
    package let readBuffer: UnsafeMutableRawBufferPointer
    /// The ``TCPConnection`` objects of this loop that exist, open or closed: one that a
    /// closed connection's owner (an HTTP connection, a stream) kept alive shows here.
    package let liveTCPConnections = LiveInstanceCount()

    private struct PendingWork {
        var tasks: [@Sendable () -> Void] = []
        var stopRequested = false
        /// The wake-up handle is closed (or about to be): `uv_async_send` on it would
        /// write to a closed eventfd, which libuv answers with `abort()`.
        var isGone = false
    }

    /// Creates a loop. Call ``run()`` on the thread that will own it, or use ``spawn(name:)``.
    public init(name: String = "loop") {
        self.name = name
        uv = .allocate(capacity: 1)
        precondition(uv_loop_init(uv) == 0, "uv_loop_init failed")
        wakeup = .allocate(capacity: 1)
        readBuffer = .allocate(byteCount: 64 * 1024, alignment: 16)
        uv_async_init(uv, wakeup) { handle in
            guard let handle, let data = handle.pointee.data else { return }
            Unmanaged<EventLoop>.fromOpaque(data).takeUnretainedValue().drainPending()
        }
        wakeup.pointee.data = Unmanaged.passUnretained(self).toOpaque()
    }

    deinit {
        if !isTornDown {
            // The loop never ran: nothing but the wake-up handle was ever opened.
            uv_close(UnsafeMutableRawPointer(wakeup).assumingMemoryBound(to: uv_handle_t.self), nil)
            uv_run(uv, UV_RUN_NOWAIT)
            uv_loop_close(uv)
        }
        wakeup.deallocate()
        uv.deallocate()
        readBuffer.deallocate()
    }

    /// Starts a thread that runs a new loop until ``stop()``.
    public static func spawn(name: String) -> EventLoop {
        let loop = EventLoop(name: name)
        let started = DispatchSemaphore(value: 0)
        let thread = Thread {
            loop.claimCurrentThread()
            started.signal()
            loop.run()
        }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
        started.wait()
        return loop
    }

    // MARK: - Running

    /// Runs the loop on the calling thread until ``stop()`` is called, then closes
    /// every handle still open and releases the loop.
    public func run() {
        claimCurrentThread()
        uv_run(uv, UV_RUN_DEFAULT)
        tearDown()
        finished.signal()
    }

    /// Blocks until ``run()`` has returned (after ``stop()``). Call it off the loop thread.
    public func waitUntilStopped() {
        precondition(!inEventLoop, "a loop cannot wait for itself to stop")
        finished.wait()
        finished.signal()
    }

    /// Asks the loop to stop after the tasks already queued. Safe from any thread.
    public func stop() {
        pending.withLock { work in
            work.stopRequested = true
            wake(work)
        }
    }

    /// Queues `task` to run on the loop thread. Safe from any thread; tasks run in order.
    public func execute(_ task: @escaping @Sendable () -> Void) {
        pending.withLock { work in
            guard !work.isGone else { return }
            work.tasks.append(task)
            wake(work)
        }
    }

    /// Wakes the loop unless it is gone; called under `pending`'s lock, so that
    /// ``tearDown()`` cannot close the handle between the check and the send.
    private func wake(_ work: borrowing PendingWork) {
        guard !work.isGone else { return }
        uv_async_send(wakeup)
    }

    /// Whether the caller is on this loop's thread.
    public var inEventLoop: Bool {
        threadID.load(ordering: .relaxed) == UInt(bitPattern: Int(bitPattern: pthread_self()))
    }

    /// Traps when called off the loop thread: loop-owned state is not thread-safe.
    @inlinable
    public func preconditionInEventLoop(file: StaticString = #fileID, line: UInt = #line) {
        precondition(inEventLoop, "touched loop-owned state off its loop thread", file: file, line: line)
    }

    /// The loop's cached clock in milliseconds (monotonic, updated once per loop iteration).
    public var now: UInt64 { uv_now(uv) }

    private func claimCurrentThread() {
        threadID.store(UInt(bitPattern: Int(bitPattern: pthread_self())), ordering: .relaxed)
    }

    private func drainPending() {
        let (tasks, stop) = pending.withLock { work -> ([@Sendable () -> Void], Bool) in
            defer { work.tasks.removeAll(keepingCapacity: true) }
            return (work.tasks, work.stopRequested)
        }
        for task in tasks { task() }
        if stop { uv_stop(uv) }
    }

    private func tearDown() {
        pending.withLock { work in
            work.isGone = true
            work.tasks.removeAll()
        }
        // Handles still open belong to wrappers nobody closed; they are closed here
        // and their few bytes leak, which is harmless at shutdown.
        uv_walk(
            uv,
            { handle, _ in
                guard let handle, uv_is_closing(handle) == 0 else { return }
                uv_close(handle, nil)
            }, nil)
        uv_run(uv, UV_RUN_DEFAULT)
        uv_loop_close(uv)
        isTornDown = true
    }
}

/// A value that belongs to one event loop, checked on every access.
///
/// Lets loop-owned state be captured by `@Sendable` closures that are known to run
/// on that loop (for example, tasks given to ``EventLoop/execute(_:)``). Like
/// swift-nio's `NIOLoopBound`, it takes a value only where no other thread can still
/// reach it: made on the loop's thread, or handed over (`sending`, which every
/// `Sendable` value can be) from anywhere.
public struct LoopBound<Value>: @unchecked Sendable {
    /// The loop that owns the value.
    public let loop: EventLoop
    private var _value: Value

    /// Wraps `value`; must be called on `loop`'s thread.
    public init(_ value: Value, loop: EventLoop) {
        loop.preconditionInEventLoop()
        self.loop = loop
        self._value = value
    }

    /// Wraps `value` from any thread: the caller hands it over and cannot touch it
    /// afterwards (the compiler checks), so from here on only `loop` can.
    public init(sending value: sending Value, loop: EventLoop) {
        self.loop = loop
        self._value = value
    }

    /// The value; traps off the owning loop's thread.
    public var value: Value {
        get {
            loop.preconditionInEventLoop()
            return _value
        }
        set {
            loop.preconditionInEventLoop()
            _value = newValue
        }
    }
}
