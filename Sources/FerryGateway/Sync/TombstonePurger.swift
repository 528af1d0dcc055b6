import FerryLoop
import FerryPostgres
import Foundation

/// `ferry serve --purge-tombstones-every`: calls `ferry.purge_tombstones` on one loop's
/// pool every interval, batch after batch until a batch deletes nothing, and logs the run.
/// A run still going when the timer fires again is left alone (that tick is skipped),
/// so runs never overlap. Loop thread only.
final class TombstonePurger {
    /// Tombstones per call (one transaction each): small enough to stay well inside
    /// the statement timeout and to hold row locks briefly.
    static let batchSize = 1000

    private let context: LoopBound<LoopContext>
    private let logger: Logger
    private let everyMilliseconds: UInt64
    private let retentionSeconds: Int
    private var timer: FerryLoop.Timer?
    private var isRunning = false
    private var isClosed = false

    init(context: LoopBound<LoopContext>, logger: Logger, everySeconds: Int, retentionSeconds: Int) {
        self.context = context
        self.logger = logger
        self.everyMilliseconds = UInt64(everySeconds) * 1000
        self.retentionSeconds = retentionSeconds
    }

    /// Arms the timer: the first run comes one interval after start.
    func start() {
        context.loop.preconditionInEventLoop()
        let timer = FerryLoop.Timer(loop: context.loop)
        self.timer = timer
        timer.start(after: everyMilliseconds, repeat: everyMilliseconds) { [weak self] in self?.tick() }
    }

    /// Stops the timer; a run in flight ends after its current batch.
    func close() {
        isClosed = true
        timer?.close()
        timer = nil
    }

    private func tick() {
        if isRunning {
            logger.log(.warning, "tombstone purge still running; skipping this interval")
            return
        }
        isRunning = true
        batch(total: 0, started: ContinuousClock.now)
    }

    private func batch(total: Int, started: ContinuousClock.Instant) {
        let purge = PurgeTombstones(retentionSeconds: retentionSeconds, batchSize: Self.batchSize)
        context.value.pool.run(purge) { [self] result in
            switch result {
            case .success(let answer):
                let deleted = answer.deleted
                if deleted > 0 && !isClosed {
                    return batch(total: total + deleted, started: started)
                }
                let elapsed = (ContinuousClock.now - started).components
                let milliseconds = elapsed.seconds * 1000 + elapsed.attoseconds / 1_000_000_000_000_000
                logger.log(
                    .info, "purged tombstones",
                    [
                        "deleted": String(total + deleted), "retention_s": String(retentionSeconds),
                        "duration_ms": String(milliseconds),
                    ])
            case .failure(let failure):
                logger.log(.error, "tombstone purge failed", ["deleted": String(total), "error": "\(failure)"])
            }
            isRunning = false
        }
    }
}
