import FerryHTTP
import FerryJSON
import FerryPostgres
import Foundation

/// A PROTOCOL.md error answer: status, code, message and any extra fields.
struct APIError: Error {
    let status: HTTPStatus
    let code: String
    let message: String
    var details: [(name: String, value: HTTPResponse.ErrorDetail)] = []
    /// Seconds for `Retry-After` (429).
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
        APIError(
            status: 429, code: "rate_limited", message: "\(limit); retry after \(retryAfterSeconds) s",
            retryAfterSeconds: retryAfterSeconds)
    }

    /// A database failure as the client sees it, for every route (PROTOCOL.md's notes,
    /// "Database errors", have the table): ``PostgresError/cause`` decides.
    /// - transient: `503 unavailable` (retryable), nothing was applied; retrying can help.
    /// - the request's data: final, so a client never retries it forever: `400
    ///   invalid_request` for a value the database cannot take (SQLSTATE classes 22,
    ///   54), `409 conflict` for one that conflicts with stored data (class 23, and
    ///   40002 at commit), each with the database's message (about the client's own data).
    /// - the server: `500 internal`; the database's message stays in the log.
    static func database(_ error: PostgresError) -> APIError {
        switch error.cause {
        case .transient:
            APIError(status: 503, code: "unavailable", message: "the database is unavailable; retry")
        case .invalidData:
            invalidRequest("the database cannot take this request's data: \(error.message)")
        case .conflict:
            APIError(status: 409, code: "conflict", message: "the request conflicts with stored data: \(error.message)")
        case .server:
            unexpected
        }
    }

    /// `500 internal` for a server bug or an unexpected answer.
    static let unexpected = APIError(status: 500, code: "internal", message: "internal error")
}

/// Request bodies: JSON, decoded with Foundation (they are small; PROTOCOL.md caps them).
enum RequestBody {
    /// The most arrays and objects a JSON body may nest, counting its outermost one;
    /// deeper is `400 invalid_json` (PROTOCOL.md's notes). It bounds the recursion of
    /// every parser after the check, PostgreSQL's included.
    static let maximumDepth = 128

    /// `400 invalid_json` for bytes that are not one JSON value, in UTF-8, nested at
    /// most ``maximumDepth`` deep; nil for good ones. Every JSON body goes through this
    /// first, so that no later reader (Foundation's, PostgreSQL's) decides alone.
    static func refusal(of bytes: [UInt8]) -> APIError? {
        let defect = bytes.withUnsafeBufferPointer { JSONObjectReader.defect(in: $0, maximumDepth: maximumDepth) }
        switch defect {
        case nil: return nil
        case .notUTF8: return .invalidJSON("the body is not valid JSON: a string is not UTF-8")
        case .tooDeep:
            return .invalidJSON("the body nests arrays and objects more than \(maximumDepth) deep")
        case .notJSON: return .invalidJSON("the body is not valid JSON")
        }
    }

    /// Decodes the body as `T`, mapping failures to `invalid_json` (not JSON, see
    /// ``refusal(of:)``) or `invalid_request` (JSON of the wrong shape, naming the field).
    /// An empty body reads as `{}`.
    static func decode<T: Decodable>(_ type: T.Type, from request: HTTPRequest) -> Result<T, APIError> {
        let bytes = request.body.isEmpty ? Array("{}".utf8) : request.body
        if let refusal = refusal(of: bytes) { return .failure(refusal) }
        do {
            return .success(try JSONDecoder().decode(T.self, from: Data(bytes)))
        } catch DecodingError.dataCorrupted(let context) where context.codingPath.isEmpty {
            return .failure(.invalidJSON("the body is not valid JSON"))
        } catch DecodingError.keyNotFound(let key, _) {
            return .failure(.invalidRequest("missing field \(key.stringValue)"))
        } catch DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context) {
            return .failure(.invalidRequest("field \(Self.path(context.codingPath)) has the wrong type"))
        } catch DecodingError.dataCorrupted(let context) {
            return .failure(.invalidRequest("field \(Self.path(context.codingPath)) is invalid"))
        } catch {
            return .failure(.invalidJSON("the body is not valid JSON"))
        }
    }

    private static func path(_ codingPath: [any CodingKey]) -> String {
        codingPath.map(\.stringValue).joined(separator: ".")
    }
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
