import FerryPostgres

extension APIError {
    /// A database failure as the client sees it, for every route (PROTOCOL.md's notes,
    /// "Database errors", have the table): ``PostgresError/cause`` decides.
    /// - transient: `503 unavailable` (retryable) with `Retry-After: 1`, nothing was
    ///   applied; retrying can help.
    /// - the request's data: final, so a client never retries it forever: `400
    ///   invalid_request` for a value the database cannot take (SQLSTATE classes 22,
    ///   54), `409 conflict` for one that conflicts with stored data (class 23, and
    ///   40002 at commit), each with the database's message (about the client's own data).
    /// - the server: `500 internal`; the database's message stays in the log.
    static func database(_ error: PostgresError) -> APIError {
        switch error.cause {
        case .transient:
            APIError(
                status: 503, code: "unavailable", message: "the database is unavailable; retry", retryAfterSeconds: 1)
        case .invalidData:
            invalidRequest("the database cannot take this request's data: \(error.message)")
        case .conflict:
            APIError(status: 409, code: "conflict", message: "the request conflicts with stored data: \(error.message)")
        case .server:
            unexpected
        }
    }
}

extension LoopContext {
    /// Logs a failed database call and returns what the client is told
    /// (``APIError/database(_:)``).
    func databaseFailure(_ error: PostgresError) -> APIError {
        let answer = APIError.database(error)
        // A refusal of the client's own data is the client's to fix; the rest is ours.
        logger.log(answer.status.code >= 500 ? .error : .warning, "database error", ["error": error.description])
        return answer
    }
}
