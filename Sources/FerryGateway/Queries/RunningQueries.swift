import FerryAuth
import FerryHTTP
import FerryPostgres

extension LoopContext {
    /// Runs `query` as `identity`: the identity statement and the query's in one pipeline
    /// before one Sync, so they share one implicit transaction and one round trip, and Row
    /// Level Security sees the caller. Calls back on the loop with the query's answer.
    ///
    /// Every request that reaches the database as a caller comes through here, so this
    /// is where ``RequestsInFlight`` counts it: from before the pool is asked until the
    /// database has answered, whether the client is still there or not (the connection
    /// is busy until then); a push also counts its body's `pushing` bytes against the
    /// device's budget. Over the device's or the user's limit `responder` is answered
    /// `429`, without a round trip, and `completion` is never called.
    func run<Query: DatabaseQuery>(
        _ query: Query, as identity: Identity, pushing bytes: Int = 0, answering responder: HTTPResponder,
        _ completion: @escaping (Result<Query.Answer, QueryFailure>) -> Void
    ) {
        guard admit(identity, pushing: bytes, answering: responder) else { return }
        run(admitted: query, as: identity, completion)
    }

    /// Counts a request of `identity` in ``RequestsInFlight`` (and `pushing` bytes against
    /// its device's budget); false, with `responder` answered `429` (``respondHeld(_:to:)``),
    /// when a limit refuses it. A request admitted here goes on with
    /// ``run(admitted:as:_:)``, or gives its place back with `requests.finish` when it
    /// fails before reaching the database (link's hash).
    func admit(_ identity: Identity, pushing bytes: Int = 0, answering responder: HTTPResponder) -> Bool {
        guard let refusal = requests.admit(identity, pushing: bytes) else { return true }
        respondHeld(refusal, to: responder)
        return false
    }

    /// Runs `query` as `identity`, whose request ``admit(_:pushing:answering:)`` counted,
    /// and gives its place back once the database has answered.
    ///
    /// A deadlock (two pushes of one user's devices writing the same rows in opposite
    /// orders) is run once more before it is answered: PostgreSQL rolled the whole
    /// transaction back and the other one goes on, so the same request almost always
    /// succeeds at once, and a client need not wait out a retryable `503` for it.
    func run<Query: DatabaseQuery>(
        admitted query: Query, as identity: Identity,
        _ completion: @escaping (Result<Query.Answer, QueryFailure>) -> Void
    ) {
        let (requests, pool, logger) = (self.requests, self.pool, self.logger)
        let statements = [identity.statement(timeout: pool.statementTimeoutSetting), query.statement]
        let answer = { (outcome: Result<[PostgresResult], PostgresError>) in
            requests.finish(identity)
            // The identity statement's result is left out.
            completion(Query.decode(outcome.map { $0[1] }))
        }
        pool.pipeline(statements) { outcome in
            guard case .failure(let error) = outcome, error.sqlState == SQLState.deadlockDetected else {
                return answer(outcome)
            }
            logger.log(.info, "deadlock: running the request once more", ["query": Query.logName])
            pool.pipeline(statements, answer)
        }
    }

    /// Answers `refusal` (a `429` saying `Retry-After: 1` or more) one second after now:
    /// a client that retries at once anyway (a flood) then sends one request per
    /// connection per second, not thousands.
    func respondHeld(_ refusal: APIError, to responder: HTTPResponder) {
        loop.schedule(after: UInt64(RequestsInFlight.retryAfterSeconds) * 1000) {
            responder.respond(refusal.response)
        }
    }

    /// The answer to a query that failed (logged): ``databaseFailure(_:)`` for the
    /// database's own errors, `500 internal` for an answer the query does not read.
    func failure(_ failure: QueryFailure) -> APIError {
        switch failure {
        case .database(let error):
            return databaseFailure(error)
        case .shape(let error):
            logger.log(.error, "unexpected answer from the database", ["error": error.description])
            return .unexpected
        }
    }
}

extension PostgresPool {
    /// Runs `query` as the gateway's own role, one statement with no caller (sign-up,
    /// refresh, sign-in, and the gateway's own tasks), after the ``TransactionSettings`` in
    /// the same pipeline. Calls back on the pool's loop.
    func run<Query: DatabaseQuery>(_ query: Query, _ completion: @escaping (Result<Query.Answer, QueryFailure>) -> Void)
    {
        pipeline([TransactionSettings.statement(timeout: statementTimeoutSetting), query.statement]) { outcome in
            // The settings' result is left out.
            completion(Query.decode(outcome.map { $0[1] }))
        }
    }
}
