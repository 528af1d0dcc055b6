import CLibUV

/// Readiness events of a file descriptor.
public struct PollEvents: OptionSet, Sendable {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    /// The descriptor can be read without blocking.
    public static let readable = PollEvents(rawValue: Int32(UV_READABLE.rawValue))
    /// The descriptor can be written without blocking.
    public static let writable = PollEvents(rawValue: Int32(UV_WRITABLE.rawValue))
}

/// Watches a socket that another library owns (libpq's) for readiness. Loop thread only.
///
/// The descriptor is not closed by this type. When the owner replaces its socket
/// (libpq does during connect), close this poll and create a new one.
public final class Poll {
    private let handle: UnsafeMutablePointer<uv_poll_t>
    private var onEvent: ((Result<PollEvents, LoopError>) -> Void)?
    private var closed = false
    /// The watched descriptor.
    public let fileDescriptor: Int32

    /// Starts watching nothing on `fileDescriptor`; call ``watch(_:_:)``.
    public init(loop: EventLoop, fileDescriptor: Int32) throws(LoopError) {
        loop.preconditionInEventLoop()
        self.fileDescriptor = fileDescriptor
        handle = .allocate(capacity: 1)
        let status = uv_poll_init_socket(loop.uv, handle, fileDescriptor)
        if status < 0 {
            handle.deallocate()
            throw LoopError(code: status, operation: "poll fd \(fileDescriptor)")
        }
        handle.pointee.data = Unmanaged.passRetained(self).toOpaque()
    }

    /// Calls `onEvent` whenever any of `events` is ready (level-triggered), or with
    /// an error. Replaces the previous interest set and callback.
    public func watch(_ events: PollEvents, _ onEvent: @escaping (Result<PollEvents, LoopError>) -> Void) {
        precondition(!closed, "watch on a closed poll")
        self.onEvent = onEvent
        uv_poll_start(handle, events.rawValue) { handle, status, events in
            guard let data = handle?.pointee.data else { return }
            let poll = Unmanaged<Poll>.fromOpaque(data).takeUnretainedValue()
            if status < 0 {
                poll.onEvent?(.failure(LoopError(code: status, operation: "poll")))
            } else {
                poll.onEvent?(.success(PollEvents(rawValue: events)))
            }
        }
    }

    /// Stops watching; ``watch(_:_:)`` may start again.
    public func pause() {
        guard !closed else { return }
        uv_poll_stop(handle)
    }

    /// Stops watching for good. The descriptor stays open.
    public func close() {
        guard !closed else { return }
        closed = true
        onEvent = nil
        closeOwnedHandle(handle)
    }
}
