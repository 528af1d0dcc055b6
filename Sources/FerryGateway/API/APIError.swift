import FerryHTTP

/// A PROTOCOL.md error answer: status, code, message and any extra fields.
struct APIError: Error {
    let status: HTTPStatus
    let code: String
    let message: String
    var details: [(name: String, value: HTTPResponse.ErrorDetail)] = []
    /// Seconds for `Retry-After` (429, and a 503 a retry can fix).
    var retryAfterSeconds: Int?

    /// The response to send.
    var response: HTTPResponse {
        var response = HTTPResponse.error(status: status, code: code, message: message, details: details)
        if let retryAfterSeconds {
            response.headers.replaceOrAdd(name: "Retry-After", value: String(retryAfterSeconds))
        }
        return response
    }

    static func invalidRequest(_ message: String) -> APIError {
        APIError(status: 400, code: "invalid_request", message: message)
    }

    static func invalidJSON(_ message: String) -> APIError {
        APIError(status: 400, code: "invalid_json", message: message)
    }

    /// `400 invalid_cursor`: a pull cursor that does not parse or verify.
    static let invalidCursor = APIError(
        status: 400, code: "invalid_cursor", message: "the cursor is not one this server issued; pull without it")

    /// `409 cursor_expired`: tombstones the cursor has not seen may have been purged.
    static let cursorExpired = APIError(
        status: 409, code: "cursor_expired",
        message: "the cursor is older than tombstone retention; drop local data and pull without a cursor")

    static func unauthorized(_ message: String) -> APIError {
        APIError(status: 401, code: "unauthorized", message: message)
    }

    /// `429 rate_limited` with `Retry-After`; `limit` says which limit was hit, e.g.
    /// "too many failed sign-ins from this address (20 per hour)".
    static func rateLimited(retryAfterSeconds: Int, limit: String = "too many requests") -> APIError {
        rateLimited(retryAfterSeconds: retryAfterSeconds, message: "\(limit); retry after \(retryAfterSeconds) s")
    }

    /// `429 rate_limited` with `Retry-After` and `message` as it is.
    static func rateLimited(retryAfterSeconds: Int, message: String) -> APIError {
        APIError(status: 429, code: "rate_limited", message: message, retryAfterSeconds: retryAfterSeconds)
    }

    /// `500 internal` for a server bug or an unexpected answer.
    static let unexpected = APIError(status: 500, code: "internal", message: "internal error")
}

extension HTTPResponder {
    /// The value of `result`, or nil once its error has been answered.
    func success<T>(of result: Result<T, APIError>) -> T? {
        switch result {
        case .success(let value): return value
        case .failure(let error):
            respond(error.response)
            return nil
        }
    }
}
