import FerryAuth
import FerryHTTP
import FerryPostgres

/// `GET` and `POST /v1/watermelon/sync`: WatermelonDB's sync backend contract
/// (docs/WATERMELONDB.md), so an app's `pullChanges` and `pushChanges` call Ferry. A push
/// is the identity statement and ``WatermelonPush`` in one pipeline, as `/v1/push` is;
/// PostgreSQL builds the answer and the gateway forwards its bytes. A pull's answer has no
/// bound on its size, so it is streamed from a cursor (``WatermelonPullStream``).
struct WatermelonRoutes {
    /// The route's path; its body limit (``bodyLimit``) is applied by path, before routing.
    static let path = "/v1/watermelon/sync"
    /// `409 cursor_expired` in WatermelonDB's terms: what the app does about it.
    static let cursorExpired = APIError(
        status: 409, code: "cursor_expired",
        message: "last_pulled_at names no snapshot this server keeps for this device, or tombstones it has not "
            + "seen were purged: reset the local database and sync again")

    let accounts: Accounts
    /// Most records in one push (FERRY_WATERMELON_MAX_PUSH_RECORDS).
    let maxPushRecords: Int
    /// Largest push body (FERRY_WATERMELON_MAX_BODY_BYTES).
    let maxBodyBytes: Int
    /// Longest a pull's streamed answer may take (FERRY_WATERMELON_PULL_SECONDS).
    let pullSeconds: Int

    /// The route's body limit, in place of the server's general one.
    var bodyLimit: PathBodyLimit {
        PathBodyLimit(
            path: Self.path, maxBytes: maxBodyBytes,
            message: "a WatermelonDB push body is at most \(maxBodyBytes) bytes (FERRY_WATERMELON_MAX_BODY_BYTES)")
    }

    /// Adds the routes for one loop; handlers use that loop's `context`.
    func register(in router: inout Router, context: LoopContext) {
        router.group(gate: accounts.callers) { routes in
            routes.get(Self.path) { request, caller, responder in
                guard let query = responder.success(of: WatermelonPullQuery.parse(request)) else { return }
                WatermelonPullStream.answer(
                    WatermelonPullOpen(lastPulledAt: query.lastPulledAt, migration: query.migration), as: caller,
                    responder: responder, context: context, maxMilliseconds: UInt64(pullSeconds) * 1000,
                    remote: request.remoteAddress
                ) { failure in Self.refusal(failure, context: context) }
            }
            routes.post(Self.path) { request, caller, responder in
                push(request, caller, responder, context)
            }
        }
    }

    private func push(_ request: HTTPRequest, _ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext) {
        let lastPulledAt: Int64?
        do {
            lastPulledAt = try WatermelonTimestamp.parse(try request.queryParameter("last_pulled_at"))
        } catch {
            return responder.respond(APIError.invalidWatermelonTimestamp.response)
        }
        guard let lastPulledAt else {
            return responder.respond(
                APIError(
                    status: 400, code: "invalid_cursor",
                    message: "a push needs last_pulled_at: the timestamp of the pull before it"
                ).response)
        }
        if let refusal = RequestBody.refusal(of: request.body) { return responder.respond(refusal.response) }
        // Checked UTF-8 above, so the decoding replaces nothing.
        let push = WatermelonPush(
            lastPulledAt: lastPulledAt, body: String(decoding: request.body, as: UTF8.self), maxRecords: maxPushRecords)
        let maxPushRecords = self.maxPushRecords
        context.run(push, as: caller, pushing: request.body.count, answering: responder) { result in
            switch result {
            case .success(let answer):
                if answer.cuesQueued { context.queuedCues.queued() }
                responder.respond(.json(bytes: answer.bytes))
            case .failure(.database(let error)) where error.sqlState == SQLState.watermelonTooManyRecords:
                responder.respond(
                    APIError(
                        status: 413, code: "payload_too_large",
                        message:
                            "a WatermelonDB push carries at most \(maxPushRecords) records (FERRY_WATERMELON_MAX_PUSH_RECORDS)"
                    ).response)
            case .failure(.database(let error)) where error.sqlState == SQLState.watermelonConflict:
                var conflict = APIError(status: 409, code: "conflict", message: error.message)
                if let detail = error.detail { conflict.details = [("conflicts", .json(Array(detail.utf8)))] }
                responder.respond(conflict.response)
            case .failure(let failure):
                responder.respond(Self.refusal(failure, context: context).response)
            }
        }
    }

    /// A failure both routes answer alike: an expired timestamp, ferry.watermelon_*'s own
    /// refusals of bad input (their messages name the table and column), the rest as
    /// every route answers a failed query.
    private static func refusal(_ failure: QueryFailure, context: LoopContext) -> APIError {
        guard case .database(let error) = failure else { return context.failure(failure) }
        switch error.sqlState {
        case SQLState.cursorExpired: return cursorExpired
        case SQLState.invalidParameterValue: return .invalidRequest(error.message)
        default: return context.failure(failure)
        }
    }
}

/// The query of a WatermelonDB pull, as `pullChanges` sends it (Frontend.md:
/// `last_pulled_at=${lastPulledAt}&schema_version=${schemaVersion}&migration=${encodeURIComponent(JSON.stringify(migration))}`).
struct WatermelonPullQuery: Equatable {
    /// nil: a first sync.
    var lastPulledAt: Int64?
    /// The app's schema version; checked, not used.
    var schemaVersion: Int?
    /// The migration's JSON text, nil when there is none (SQL reads its shape).
    var migration: String?

    /// Reads the query strictly: `last_pulled_at` as ``WatermelonTimestamp/parse(_:)``
    /// (`400 invalid_cursor`), `schema_version` a positive integer when present,
    /// `migration` JSON when present and not `null` (else `400 invalid_request`).
    static func parse(_ request: HTTPRequest) -> Result<WatermelonPullQuery, APIError> {
        var query = WatermelonPullQuery()
        do {
            query.lastPulledAt = try WatermelonTimestamp.parse(try request.queryParameter("last_pulled_at"))
        } catch {
            return .failure(.invalidWatermelonTimestamp)
        }
        do {
            if let text = try request.queryParameter("schema_version") {
                guard text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let version = Int(text), version > 0 else {
                    return .failure(.invalidRequest("schema_version must be a positive integer"))
                }
                query.schemaVersion = version
            }
            if let text = try request.queryParameter("migration"), !text.isEmpty, text != "null" {
                guard RequestBody.refusal(of: Array(text.utf8)) == nil else {
                    return .failure(.invalidRequest("migration is not JSON"))
                }
                query.migration = text
            }
        } catch {
            return .failure(.invalidRequest("query parameter \(error)"))
        }
        return .success(query)
    }
}

/// WatermelonDB's `lastPulledAt` in a query string: the number a pull answered as its
/// `timestamp`, which WatermelonDB keeps as text and reads back with `parseInt`.
enum WatermelonTimestamp {
    /// The largest timestamp Ferry issues, 2^53 − 1: exact in a JavaScript number.
    static let maximum: Int64 = 9_007_199_254_740_991

    /// The timestamp in `text`: nil for a first sync (no parameter, empty, `null` or
    /// `0`), else decimal digits naming 1 to ``maximum``. Anything else throws.
    static func parse(_ text: String?) throws(InvalidTimestamp) -> Int64? {
        guard let text, !text.isEmpty, text != "null" else { return nil }
        guard text.utf8.count <= 16, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let value = Int64(text),
            value <= maximum
        else { throw InvalidTimestamp() }
        return value == 0 ? nil : value
    }

    /// A `last_pulled_at` that is not a timestamp.
    struct InvalidTimestamp: Error {}
}

extension SQLState {
    /// `FRCNF`, Ferry's own: what `ferry.watermelon_push` raises when a pushed record
    /// changed on the server after `last_pulled_at` (sql/ferry/functions/watermelon_push.sql);
    /// its DETAIL holds the ids by table. Answered `409 conflict`.
    static let watermelonConflict = "FRCNF"
    /// `FR413`, Ferry's own: what `ferry.watermelon_push` raises for more records than
    /// its limit, answered `413 payload_too_large`.
    static let watermelonTooManyRecords = "FR413"
}

extension APIError {
    /// `400 invalid_cursor` for a `last_pulled_at` that is not a timestamp.
    static let invalidWatermelonTimestamp = APIError(
        status: 400, code: "invalid_cursor",
        message:
            "last_pulled_at must be the timestamp of a pull (an integer from 1 to 2^53 - 1), or null for a first sync")
}
