import FerryAuth
import FerryHTTP
import FerryLoop
import FerryPostgres

/// One loop's read replicas (`--read-database-url`): a pool per hot standby, and the
/// primary's position, read once for every read that arrived before the reading was sent.
/// Loop thread only.
///
/// A read (a pull, `/v1/schema`) runs on a replica only once that replica has replayed
/// past the primary's WAL insert position read after the read arrived: every commit
/// visible on the primary then, so every commit whose cue the client had seen, and every
/// commit the client's cursor saw, is visible there (docs/OPERATIONS.md "Read replicas").
final class ReadReplicas {
    let loop: EventLoop
    /// One pool per replica URL, tried in turn.
    let pools: [PostgresPool]
    /// How long a read waits for a replica to replay far enough.
    let waitMilliseconds: UInt64
    private let primary: PostgresPool
    private var turn = 0
    /// When each replica (by index in ``pools``) last failed to connect, on the loop's
    /// clock; nil while it answers.
    private var failedAt: [UInt64?]
    /// How long reads pass over a replica that failed to connect, instead of each paying
    /// a failed attempt (and a log line).
    static let restMilliseconds: UInt64 = 1000
    /// Those waiting for the reading in flight, which was sent after they asked.
    private var answering: [(Result<String, QueryFailure>) -> Void]?
    /// Those who asked after it was sent: the next reading is theirs.
    private var queued: [(Result<String, QueryFailure>) -> Void] = []

    /// A pool of `poolSize` connections per database of `databases`; nil when there are none.
    init?(
        loop: EventLoop, databases: [PostgresConfiguration], primary: PostgresPool, poolSize: Int,
        waitMilliseconds: UInt64
    ) {
        guard !databases.isEmpty else { return nil }
        self.loop = loop
        pools = databases.map { PostgresPool(loop: loop, configuration: $0, maxConnections: poolSize) }
        failedAt = Array(repeating: nil, count: databases.count)
        self.primary = primary
        self.waitMilliseconds = waitMilliseconds
    }

    /// Calls back with the primary's `ferry.history_here()` read after this call (JSON
    /// text whose `lsn` a replica must reach), or why there is none. One query serves
    /// every caller that asked before it was sent.
    func primaryHistory(_ completion: @escaping (Result<String, QueryFailure>) -> Void) {
        loop.preconditionInEventLoop()
        if answering == nil {
            answering = [completion]
            read()
        } else {
            queued.append(completion)
        }
    }

    private func read() {
        primary.run(PrimaryHistory()) { [self] result in
            let answered = answering ?? []
            if queued.isEmpty {
                answering = nil
            } else {
                answering = queued
                queued = []
                read()
            }
            for completion in answered { completion(result.map(\.json)) }
        }
    }

    /// The replica the next read tries (its index in ``pools``), in turn, passing over
    /// those that failed to connect within ``restMilliseconds``; nil when every one did.
    func nextReplica() -> Int? {
        for _ in pools.indices {
            let index = turn
            turn = (turn + 1) % pools.count
            if let failed = failedAt[index], loop.now < failed + Self.restMilliseconds { continue }
            return index
        }
        return nil
    }

    /// Notes whether replica `index` could be reached; true when that changed, to be logged.
    func noteReachable(_ index: Int, _ reachable: Bool) -> Bool {
        let changed = (failedAt[index] == nil) != reachable
        failedAt[index] = reachable ? nil : loop.now
        return changed
    }

    /// Closes every replica's pool.
    func close() {
        for pool in pools { pool.close() }
    }
}

extension LoopContext {
    /// Runs a read `query` as `identity` (admitted and counted as ``run(_:as:pushing:answering:_:)``
    /// does) on a read replica that has replayed past the primary's position at this call,
    /// asking again for up to ``ReadReplicas/waitMilliseconds``, else on the primary; on the
    /// primary alone without replicas. A replica's failure sends the read to the primary,
    /// unless `isAnswer` says the error is the read's own answer (an expired cursor).
    /// Calls back with the answer and the database that gave it.
    func runRead<Query: DatabaseQuery>(
        _ query: Query, as identity: Identity, answering responder: HTTPResponder,
        isAnswer: @escaping (PostgresError) -> Bool = { _ in false },
        _ completion: @escaping (Result<Query.Answer, QueryFailure>, ReadServer) -> Void
    ) {
        guard admit(identity, answering: responder) else { return }
        guard let replicas else { return run(admitted: query, as: identity) { completion($0, .primary) } }
        let onPrimary = { [self] (reason: ReplicaFallback) in
            metrics.replicaFallback(reason)
            run(admitted: query, as: identity) { completion($0, .primary) }
        }
        replicas.primaryHistory { [self] history in
            guard case .success(let history) = history else { return onPrimary(.error) }
            let statements = [
                ReplicaCaughtUp(primaryHistory: history).statement,
                identity.statement(timeout: pool.statementTimeoutSetting), query.statement,
            ]
            guard let replica = replicas.nextReplica() else { return onPrimary(.error) }
            let pool = replicas.pools[replica]
            let logReachable = { [self] (reachable: Bool, error: PostgresError?) in
                guard replicas.noteReachable(replica, reachable) else { return }
                // Which of --read-database-url, counted from 1: the URL may hold a password.
                let which = String(replica + 1)
                if let error {
                    logger.log(
                        .warning, "read replica unreachable: the primary serves its reads for now",
                        ["replica": which, "error": error.description])
                } else {
                    logger.log(.info, "read replica reachable", ["replica": which])
                }
            }
            let deadline = loop.now + replicas.waitMilliseconds
            var pause: UInt64 = 1
            func attempt() {
                pool.pipeline(statements) { [self] outcome in
                    switch outcome {
                    case .success(let results):
                        logReachable(true, nil)
                        requests.finish(identity)
                        completion(Query.decode(.success(results[2])), .replica)
                    case .failure(let error) where error.sqlState == SQLState.replicaBehind:
                        let now = loop.now
                        guard now < deadline else { return onPrimary(.lag) }
                        // Replay is usually a few milliseconds behind: ask again soon, then less often.
                        loop.schedule(after: min(pause, deadline - now)) { attempt() }
                        pause = min(pause * 2, 16)
                    case .failure(let error) where error.sqlState == SQLState.primaryOnly:
                        onPrimary(.primaryOnly)
                    case .failure(let error) where isAnswer(error):
                        requests.finish(identity)
                        completion(.failure(.database(error)), .replica)
                    case .failure(let error) where error.kind == .connectionFailed:
                        logReachable(false, error)
                        onPrimary(.error)
                    case .failure(let error):
                        logger.log(.warning, "read replica failed: the primary serves", ["error": error.description])
                        onPrimary(.error)
                    }
                }
            }
            attempt()
        }
    }
}
