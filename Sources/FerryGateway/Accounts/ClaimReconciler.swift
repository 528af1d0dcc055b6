import FerryLoop
import FerryPostgres
import Foundation

/// Every gateway of a shard, on its first loop, every ``everyMilliseconds``: settles its
/// own shard's email directory claims pending for longer than `--directory-claim-seconds`
/// against its own database (``EmailDirectory/reconcile(shard:olderThanSeconds:confirmed:on:_:)``).
/// Several gateways of one shard doing so at once is harmless: a claim is settled once,
/// the others find it `unchanged`. A round still going when the timer fires is left alone.
/// Loop thread only.
final class ClaimReconciler {
    private let context: LoopBound<LoopContext>
    private let olderThanSeconds: Int
    private let confirmed: Bool
    private let everyMilliseconds: UInt64
    private var timer: FerryLoop.Timer?
    private var isRunning = false

    init(context: LoopBound<LoopContext>, olderThanSeconds: Int, confirmed: Bool) {
        self.context = context
        self.olderThanSeconds = olderThanSeconds
        self.confirmed = confirmed
        everyMilliseconds = UInt64(min(max(olderThanSeconds / 2, 1), 30)) * 1000
    }

    func start() {
        context.loop.preconditionInEventLoop()
        let timer = FerryLoop.Timer(loop: context.loop)
        self.timer = timer
        timer.start(after: everyMilliseconds, repeat: everyMilliseconds) { [weak self] in
            guard let self, !self.isRunning else { return }
            self.isRunning = true
            self.round(olderThanSeconds: self.olderThanSeconds) { [weak self] _ in self?.isRunning = false }
        }
    }

    func close() {
        timer?.close()
        timer = nil
    }

    /// One round: this shard's number, then its stale claims settled; how many, or nil.
    func round(olderThanSeconds: Int, _ completion: @escaping (Int?) -> Void) {
        let context = context.value
        guard let directory = context.directory else { return completion(0) }
        context.pool.run(ThisShard()) { [confirmed] result in
            guard case .success(let this) = result else { return completion(nil) }
            directory.reconcile(
                shard: this.shard, olderThanSeconds: olderThanSeconds, confirmed: confirmed, on: context.pool,
                completion)
        }
    }
}
