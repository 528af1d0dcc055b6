import FerryHTTP
import FerryLoop

/// Gathers the listener's `ferry_cue` notifications on its loop and hands each batch
/// to every loop's ``SharedPulls`` and ``CueHub``: one wake-up per loop per batch, not per
/// notification. The barriers of ``SharedPulls`` ride in the same batches, after the cues
/// that arrived before them, so a loop has taken in every cue a barrier follows when it
/// hears the barrier. Listener loop only.
///
/// libpq hands over every notification a read brought; the batch goes out right after
/// that iteration's I/O (an ``IterationHook``), so batching adds no waiting.
final class CueBatcher {
    private let contexts: [LoopBound<LoopContext>]
    private let status: ListenerStatus
    private let logger: Logger
    private var batch: [Cue] = []
    private var barriers: [String] = []
    private var hook: IterationHook?

    init(loop: EventLoop, contexts: [LoopBound<LoopContext>], status: ListenerStatus, logger: Logger) {
        self.contexts = contexts
        self.status = status
        self.logger = logger
        hook = IterationHook(loop: loop) { [weak self] in self?.flush() }
    }

    /// Adds one notification's payload to the batch.
    func add(_ payload: String) {
        guard let cue = Cue(payload: payload, receivedAt: MonotonicClock.now()) else {
            logger.log(.warning, "unreadable cue notification", ["payload": payload])
            return
        }
        batch.append(cue)
    }

    /// Adds one ``SharedPulls`` barrier's payload, after the cues that came before it.
    func addBarrier(_ payload: String) {
        barriers.append(payload)
    }

    private func flush() {
        guard !batch.isEmpty || !barriers.isEmpty else { return }
        let cues = batch
        let barriers = self.barriers
        batch.removeAll(keepingCapacity: true)
        self.barriers.removeAll(keepingCapacity: true)
        status.cuesReceived(cues.count)
        for context in contexts {
            context.loop.execute {
                let context = context.value
                if let sharedPulls = context.sharedPulls {
                    sharedPulls.noteCues(cues)
                    for barrier in barriers { sharedPulls.barrierReached(barrier) }
                }
                if !cues.isEmpty { context.hub.deliver(cues) }
            }
        }
    }

    /// Stops batching; what is gathered is dropped.
    func close() {
        hook?.close()
        hook = nil
    }
}
