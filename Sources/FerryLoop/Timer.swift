import CLibUV

/// A libuv timer on one loop. Loop thread only.
///
/// The timer keeps itself alive until ``close()``; calling ``start(after:repeat:_:)``
/// again re-arms it with a new deadline (cheap: no allocation).
public final class Timer {
    private let handle: UnsafeMutablePointer<uv_timer_t>
    private var fire: (() -> Void)?
    private var closed = false

    /// Creates a stopped timer on `loop`.
    public init(loop: EventLoop) {
        loop.preconditionInEventLoop()
        handle = .allocate(capacity: 1)
        uv_timer_init(loop.uv, handle)
        handle.pointee.data = Unmanaged.passRetained(self).toOpaque()
    }

    /// Calls `body` after `milliseconds`, then every `repeat` milliseconds when that is above zero.
    public func start(after milliseconds: UInt64, repeat: UInt64 = 0, _ body: @escaping () -> Void) {
        precondition(!closed, "start on a closed timer")
        fire = body
        uv_timer_start(
            handle,
            { handle in
                guard let data = handle?.pointee.data else { return }
                Unmanaged<Timer>.fromOpaque(data).takeUnretainedValue().fire?()
            }, milliseconds, `repeat`)
    }

    /// Stops the timer; it can be started again.
    public func stop() {
        guard !closed else { return }
        uv_timer_stop(handle)
    }

    /// Stops the timer for good and releases it once libuv is done with the handle.
    public func close() {
        guard !closed else { return }
        closed = true
        fire = nil
        closeOwnedHandle(handle)
    }
}

extension EventLoop {
    /// Runs `body` once after `milliseconds`. Loop thread only.
    ///
    /// Returns the timer so it can be cancelled with ``Timer/close()``; it closes
    /// itself after firing.
    @discardableResult
    public func schedule(after milliseconds: UInt64, _ body: @escaping () -> Void) -> Timer {
        let timer = Timer(loop: self)
        timer.start(after: milliseconds) { [unowned timer] in
            timer.close()
            body()
        }
        return timer
    }
}
