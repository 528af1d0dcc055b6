import FerryAuth
import FerryHTTP
import FerryPostgres

extension Identity {
    /// Switches a transaction to the request role and sets who is asking, all
    /// transaction-locally and in one statement. Prepared once per connection.
    static let statementName = "ferry_identity"
    static let statementSQL = """
        select pg_catalog.set_config('role', 'ferry_client', true),
            pg_catalog.set_config('ferry.user_id', $1, true),
            pg_catalog.set_config('ferry.device_id', $2, true),
            pg_catalog.set_config('ferry.session_id', $3, true)
        """

    /// The identity statement for this caller.
    var statement: PostgresStatement {
        PostgresStatement(Self.statementSQL, [userID, deviceID, sessionID], preparedName: Self.statementName)
    }
}

extension LoopContext {
    /// Runs `statements` as `identity`: the identity statement and the work in one
    /// pipeline before one Sync, so they share one implicit transaction and one round
    /// trip, and Row Level Security sees the caller. Calls back on the loop with the
    /// results of `statements` (the identity statement's own result left out).
    ///
    /// Every request that reaches the database as a caller comes through here, so this
    /// is where ``RequestsInFlight`` counts it: from before the pool is asked until the
    /// database has answered, whether the client is still there or not (the connection
    /// is busy until then); a push also counts its body's `pushing` bytes against the
    /// device's budget. Over the device's or the user's limit `responder` is answered
    /// `429`, without a round trip, and `completion` is never called.
    func run(
        as identity: Identity, _ statements: [PostgresStatement], pushing bytes: Int = 0,
        answering responder: HTTPResponder,
        _ completion: @escaping (Result<[PostgresResult], PostgresError>) -> Void
    ) {
        if let refusal = requests.admit(identity, pushing: bytes) {
            // Sent after its Retry-After: a client that retries at once anyway (a flood)
            // then sends one request per connection per second, not thousands.
            loop.schedule(after: UInt64(RequestsInFlight.retryAfterSeconds) * 1000) {
                responder.respond(refusal.response)
            }
            return
        }
        let requests = self.requests
        pool.pipeline([identity.statement] + statements) { result in
            requests.finish(identity)
            completion(result.map { Array($0.dropFirst()) })
        }
    }
}
