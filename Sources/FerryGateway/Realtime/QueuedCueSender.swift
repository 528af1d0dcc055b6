import FerryLoop
import FerryPostgres

/// Sends the cues that the pushes this loop committed queued (`ferry.queue_cue`,
/// sql/ferry/functions/cues.sql), by `ferry.send_queued_cues` on the loop's pool: one
/// notifying transaction for every push committed while the one before was in flight,
/// instead of a NOTIFY in each push's commit (docs/ARCHITECTURE.md, "Cues out of the
/// commit"). The commits of one loop iteration fold into one send, started after the
/// iteration's I/O (an ``IterationHook``, as ``CueBatcher`` does), so folding adds no
/// waiting. One loop's sender also sweeps every second, sending what a gateway that died
/// between a push's commit and its send left queued. Loop thread only.
final class QueuedCueSender {
    /// How often the sweeping sender sends whatever is queued, pushes or not.
    static let sweepMilliseconds: UInt64 = 1000

    private let loop: EventLoop
    private let pool: PostgresPool
    private let logger: Logger
    private var sending = QueuedCueSending()
    /// A commit queued cues during this iteration.
    private var isWanted = false
    private var hook: IterationHook?
    private var sweep: FerryLoop.Timer?
    private var isClosed = false

    init(loop: EventLoop, pool: PostgresPool, logger: Logger) {
        self.loop = loop
        self.pool = pool
        self.logger = logger
        hook = IterationHook(loop: loop) { [weak self] in self?.iterationEnded() }
    }

    /// A push that queued cues has committed: they are sent after this iteration, or
    /// right after the send in flight (whose snapshot may predate this commit).
    func queued() {
        loop.preconditionInEventLoop()
        isWanted = true
    }

    private func iterationEnded() {
        guard isWanted else { return }
        isWanted = false
        if !isClosed && sending.queued() { send() }
    }

    /// Arms the sweep: a send every ``sweepMilliseconds``, folded into one in flight.
    func startSweeping() {
        loop.preconditionInEventLoop()
        let timer = FerryLoop.Timer(loop: loop)
        sweep = timer
        timer.start(after: Self.sweepMilliseconds, repeat: Self.sweepMilliseconds) { [weak self] in self?.queued() }
    }

    /// Stops the sweep and starts no more sends; one in flight finishes or fails with the pool.
    func close() {
        isClosed = true
        hook?.close()
        hook = nil
        sweep?.close()
        sweep = nil
    }

    private func send() {
        pool.run(SendQueuedCues()) { [self] result in
            if case .failure(let failure) = result, !isClosed {
                logger.log(
                    .warning, "could not send queued cues; the next push or the sweep sends them",
                    ["error": "\(failure)"])
            }
            if !isClosed && sending.sent() { send() }
        }
    }
}

/// When ``QueuedCueSender`` sends: at most one send in flight, and a commit while one is
/// in flight makes one more after it, which sends that commit's cues with every other
/// queued meanwhile (however many commits came in between).
struct QueuedCueSending {
    private(set) var isSending = false
    private(set) var isDue = false

    /// A commit queued cues: whether to start a send now.
    mutating func queued() -> Bool {
        if isSending {
            isDue = true
            return false
        }
        isSending = true
        return true
    }

    /// The send in flight ended: whether to start another.
    mutating func sent() -> Bool {
        if isDue {
            isDue = false
            return true
        }
        isSending = false
        return false
    }
}
