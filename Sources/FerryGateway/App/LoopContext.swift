import FerryAuth
import FerryHTTP
import FerryLoop
import FerryPostgres
import Foundation

/// One event loop's share of the gateway: its database pool, counters, log buffer
/// and streams. Loop thread only; handlers on that loop reach it without locks.
final class LoopContext: HTTPObserver {
    let loop: EventLoop
    let pool: PostgresPool
    /// The read replicas pulls and `/v1/schema` go to, when `--read-database-url` names any.
    let replicas: ReadReplicas?
    /// The email directory every shard shares, when `--directory-database-url` names one.
    let directory: EmailDirectory?
    /// The process's count of requests in flight per device and user (shared by every loop).
    let requests: RequestsInFlight
    /// The process's log.
    let logger: Logger
    let metrics = LoopMetrics()
    let log: LogBuffer
    let hub: CueHub
    /// Sends the cues this loop's pushes queued, after their commits.
    let queuedCues: QueuedCueSender
    /// Answers the shared part of pulls from memory, unless `--shared-pull-cache off`.
    let sharedPulls: SharedPulls?

    init(
        loop: EventLoop, pool: PostgresPool, logger: Logger, streams: StreamPolicy, accounts: Accounts,
        quota: ConcurrencyLimit<UUID>, requests: RequestsInFlight, replicas: ReadReplicas? = nil,
        directory: EmailDirectory? = nil, sharedPulls: SharedPulls? = nil
    ) {
        loop.preconditionInEventLoop()
        self.loop = loop
        self.pool = pool
        self.replicas = replicas
        self.directory = directory
        self.requests = requests
        self.logger = logger
        self.log = LogBuffer(logger: logger, loop: loop)
        hub = CueHub(loop: loop, policy: streams, accounts: accounts, quota: quota, metrics: metrics)
        queuedCues = QueuedCueSender(loop: loop, pool: pool, logger: logger)
        self.sharedPulls = sharedPulls
    }

    /// The counters of this loop, with its pool's gauges.
    func snapshot() -> MetricsSnapshot {
        var snapshot = metrics.copy()
        let statistics = pool.statistics
        snapshot.poolInUse = statistics.inUse
        snapshot.poolIdle = statistics.idle
        snapshot.poolWaiting = statistics.waiting
        return snapshot
    }

    /// Releases the loop's resources once its connections are gone.
    func close() {
        queuedCues.close()
        sharedPulls?.close()
        pool.close()
        replicas?.close()
        directory?.close()
        log.close()
    }

    // MARK: - HTTPObserver

    func connectionOpened(remoteAddress: String?) {
        metrics.connectionOpened()
    }

    func connectionClosed(remoteAddress: String?) {
        metrics.connectionClosed()
    }

    func responseSent(_ record: HTTPResponseRecord) {
        metrics.recordRequest(
            route: record.route, status: record.status.code, durationNanoseconds: record.durationNanoseconds)
        log.request(
            method: record.method?.description ?? "-", route: record.route,
            status: record.status.code, durationNanoseconds: record.durationNanoseconds,
            bytes: record.responseBytes, remote: record.remoteAddress?.description)
    }
}
