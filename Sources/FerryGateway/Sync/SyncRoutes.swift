import FerryAuth
import FerryHTTP
import FerryPostgres
import Foundation

/// `POST /v1/push`, `GET /v1/pull` and `GET /v1/schema`, for callers only: each is the
/// identity statement and one query (``Push``, ``Pull``, ``TableSchema``) in one pipeline;
/// PostgreSQL builds the JSON answer and the gateway forwards its bytes (pull's with the
/// cursor sealed and spliced in).
struct SyncRoutes {
    /// Rows per pull answer when the client names no `limit`.
    static let defaultPullLimit = 1000
    /// The largest `limit` a pull accepts; more is `400 invalid_request`.
    static let maximumPullLimit = 5000
    /// What `ferry.pull` raises for a cursor it cannot read: `400 invalid_cursor`.
    static let unreadableCursor: Set = [SQLState.invalidTextRepresentation, SQLState.invalidParameterValue]

    let accounts: Accounts
    let maxPushMutations: Int
    let cursors: PullCursorSealer

    /// Adds the routes for one loop; handlers use that loop's `context`.
    func register(in router: inout Router, context: LoopContext) {
        router.group(gate: accounts.callers) { routes in
            routes.post("/v1/push") { request, caller, responder in
                push(request, caller, responder, context)
            }
            routes.get("/v1/pull") { request, caller, responder in
                pull(request, caller, responder, context)
            }
            routes.get("/v1/schema") { _, caller, responder in
                context.runRead(TableSchema(), as: caller, answering: responder) { result, _ in
                    switch result {
                    case .success(let schema): responder.respond(.json(bytes: schema.bytes))
                    case .failure(let failure): responder.respond(context.failure(failure).response)
                    }
                }
            }
        }
    }

    private func push(_ request: HTTPRequest, _ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext) {
        if let refusal = RequestBody.refusal(of: request.body) { return responder.respond(refusal.response) }
        // Checked UTF-8 above, so the decoding replaces nothing.
        let push = Push(body: String(decoding: request.body, as: UTF8.self), maxMutations: maxPushMutations)
        let maxPushMutations = self.maxPushMutations
        context.run(push, as: caller, pushing: request.body.count, answering: responder) { result in
            switch result {
            case .success(let answer):
                guard let json = answer.json else {
                    return responder.respond(
                        APIError(
                            status: 413, code: "payload_too_large",
                            message: "a push carries at most \(maxPushMutations) mutations"
                        ).response)
                }
                if answer.cuesQueued { context.queuedCues.queued() }
                responder.respond(.json(bytes: json))
            case .failure(.database(let error)) where error.sqlState == SQLState.invalidParameterValue:
                // ferry.push's own refusals of a malformed batch: their messages are for clients.
                responder.respond(APIError.invalidRequest(error.message).response)
            case .failure(let failure):
                responder.respond(context.failure(failure).response)
            }
        }
    }

    private func pull(_ request: HTTPRequest, _ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext) {
        guard let pull = responder.success(of: pullQuery(request, caller)) else { return }
        // A pull whose only news can be shared is answered from the loop's memory of the
        // shared tables' changes when it can be (SharedPulls); every other by PostgreSQL.
        guard let sharedPulls = context.sharedPulls, let raw = pull.cursor, let cursor = SettledPullCursor(raw: raw),
            let user = UUID(uuidString: caller.userID)
        else { return pullFromDatabase(pull, caller, responder, context) }
        sharedPulls.decide(cursor, user: user, limit: pull.limit) { decision in
            switch decision {
            case .answer(let body, let cursor):
                context.metrics.pullServed(by: .sharedCache)
                respond(body: body, cursor: cursor, caller, responder)
            case .database:
                pullFromDatabase(pull, caller, responder, context)
            }
        }
    }

    /// Answers a pull: ferry.pull's `body` without its cursor, with `cursor` sealed and spliced in.
    private func respond(body: [UInt8], cursor: [UInt8], _ caller: Identity, _ responder: HTTPResponder) {
        var body = body
        guard body.last == UInt8(ascii: "}") else { return responder.respond(APIError.unexpected.response) }
        body.removeLast()
        body.append(contentsOf: #", "cursor": ""#.utf8)
        body.append(contentsOf: cursors.seal(cursor, for: caller).utf8)
        body.append(contentsOf: #""}"#.utf8)
        responder.respond(.json(bytes: body))
    }

    private func pullFromDatabase(
        _ pull: Pull, _ caller: Identity, _ responder: HTTPResponder, _ context: LoopContext
    ) {
        let isAnswer = { (error: PostgresError) in
            pull.cursor != nil
                && (error.sqlState == SQLState.cursorExpired || Self.unreadableCursor.contains(error.sqlState ?? ""))
        }
        context.runRead(pull, as: caller, answering: responder, isAnswer: isAnswer) { result, server in
            context.metrics.pullServed(by: server)
            switch result {
            case .success(let answer):
                respond(body: answer.body, cursor: answer.cursor, caller, responder)
            case .failure(.database(let error)) where pull.cursor != nil && error.sqlState == SQLState.cursorExpired:
                responder.respond(APIError.cursorExpired.response)
            case .failure(.database(let error))
            where pull.cursor != nil && Self.unreadableCursor.contains(error.sqlState ?? ""):
                // Only a cursor we sealed reaches SQL, so this is one ferry.pull cannot read.
                responder.respond(APIError.invalidCursor.response)
            case .failure(let failure):
                responder.respond(context.failure(failure).response)
            }
        }
    }

    /// The pull a request asks for: its `limit` (default ``defaultPullLimit``) and its
    /// cursor, opened (`400 invalid_cursor` for one this server did not seal for this device).
    private func pullQuery(_ request: HTTPRequest, _ caller: Identity) -> Result<Pull, APIError> {
        var pull = Pull(cursor: nil, limit: Self.defaultPullLimit)
        do {
            if let text = try request.queryParameter("limit") {
                guard let value = Int(text), (1...Self.maximumPullLimit).contains(value) else {
                    return .failure(.invalidRequest("limit must be an integer from 1 to \(Self.maximumPullLimit)"))
                }
                pull.limit = value
            }
        } catch {
            return .failure(.invalidRequest("query parameter \(error)"))
        }
        do {
            if let cursor = try request.queryParameter("cursor"), !cursor.isEmpty {
                guard let opened = cursors.open(cursor, for: caller) else { return .failure(.invalidCursor) }
                pull.cursor = opened
            }
        } catch {
            return .failure(.invalidCursor)
        }
        return .success(pull)
    }
}

extension SQLState {
    /// `FR409`, Ferry's own: what `ferry.pull` raises for a cursor the tombstone purges
    /// may have cut short (sql/ferry/functions/pull.sql), answered `409 cursor_expired`.
    static let cursorExpired = "FR409"
}
