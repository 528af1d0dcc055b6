import CLibUV

/// Calls back on a loop when the process receives a signal. Loop thread only.
public final class SignalWatcher {
    private let handle: UnsafeMutablePointer<uv_signal_t>
    private var onSignal: ((Int32) -> Void)?
    private var closed = false

    /// Watches `signal` (e.g. `SIGTERM`) until ``close()``.
    public init(loop: EventLoop, signal: Int32, _ onSignal: @escaping (Int32) -> Void) {
        loop.preconditionInEventLoop()
        handle = .allocate(capacity: 1)
        self.onSignal = onSignal
        uv_signal_init(loop.uv, handle)
        handle.pointee.data = Unmanaged.passRetained(self).toOpaque()
        uv_signal_start(
            handle,
            { handle, signal in
                guard let data = handle?.pointee.data else { return }
                Unmanaged<SignalWatcher>.fromOpaque(data).takeUnretainedValue().onSignal?(signal)
            }, signal)
    }

    /// Stops watching.
    public func close() {
        guard !closed else { return }
        closed = true
        onSignal = nil
        closeOwnedHandle(handle)
    }
}
