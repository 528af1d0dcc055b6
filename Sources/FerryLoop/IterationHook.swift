import CLibUV

/// Calls back once per loop iteration, right after I/O callbacks ran. Loop thread only.
///
/// Lets per-loop buffers (log lines) be flushed with one write per iteration instead
/// of one per event. It does not keep the loop alive.
public final class IterationHook {
    private let handle: UnsafeMutablePointer<uv_check_t>
    private var body: (() -> Void)?
    private var closed = false

    /// Starts calling `body` after each iteration's I/O.
    public init(loop: EventLoop, _ body: @escaping () -> Void) {
        loop.preconditionInEventLoop()
        handle = .allocate(capacity: 1)
        self.body = body
        uv_check_init(loop.uv, handle)
        handle.pointee.data = Unmanaged.passRetained(self).toOpaque()
        uv_check_start(handle) { handle in
            guard let data = handle?.pointee.data else { return }
            Unmanaged<IterationHook>.fromOpaque(data).takeUnretainedValue().body?()
        }
        uv_unref(asHandle(handle))
    }

    /// Stops the hook.
    public func close() {
        guard !closed else { return }
        closed = true
        body = nil
        closeOwnedHandle(handle)
    }
}
