import FerryLoop
import Foundation

/// SIGINT and SIGTERM, watched on one loop: the first begins a graceful shutdown,
/// held until the gateway serves (and reported to `whileStarting` meanwhile); the
/// second ends the process at once.
final class ShutdownSignals {
    private var watchers: [SignalWatcher] = []
    private var signalsReceived = 0
    private var isServing = false
    private var pending: Int32?
    private let whileStarting: (Int32) -> Void
    private let beginShutdown: (Int32) -> Void
    private let exitAtOnce: (Int32) -> Void

    private init(
        whileStarting: @escaping (Int32) -> Void, beginShutdown: @escaping (Int32) -> Void,
        exitAtOnce: @escaping (Int32) -> Void
    ) {
        self.whileStarting = whileStarting
        self.beginShutdown = beginShutdown
        self.exitAtOnce = exitAtOnce
    }

    /// Watches both signals on `loop` and returns once they are watched. Call off the loop.
    static func install(
        on loop: EventLoop, whileStarting: @escaping @Sendable (Int32) -> Void,
        beginShutdown: @escaping @Sendable (Int32) -> Void, exitAtOnce: @escaping @Sendable (Int32) -> Void
    ) -> LoopBound<ShutdownSignals> {
        loop.runAndWait {
            let signals = ShutdownSignals(
                whileStarting: whileStarting, beginShutdown: beginShutdown, exitAtOnce: exitAtOnce)
            signals.watchers = [SIGINT, SIGTERM].map { number in
                SignalWatcher(loop: loop, signal: number) { [unowned signals] in signals.received($0) }
            }
            return LoopBound(signals, loop: loop)
        }
    }

    /// The gateway serves: a signal received meanwhile begins the shutdown now.
    func serving() {
        isServing = true
        if let pending { beginShutdown(pending) }
    }

    private func received(_ signal: Int32) {
        signalsReceived += 1
        if signalsReceived > 1 { return exitAtOnce(signal) }
        if isServing {
            beginShutdown(signal)
        } else {
            pending = signal
            whileStarting(signal)
        }
    }
}
