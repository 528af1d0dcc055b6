import FerryHTTP
import FerryPostgres

/// `POST /v1/push`, `GET /v1/pull` and `GET /v1/schema`: each is the identity statement
/// and one SQL function call in one pipeline; PostgreSQL builds the JSON answer and the
/// gateway forwards its bytes (pull's with the cursor sealed and spliced in).
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
        let accounts = self.accounts
        // ferry.push_body (sql/ferry/functions/push.sql) checks the limit before it reads
        // the mutations, so an oversized batch costs no parse in the gateway and writes
        // nothing. The body goes as text: a mutation PostgreSQL cannot store (a \u0000)
        // fails its own cast to jsonb there, not the whole statement's.
        let pushSQL = "select ferry.push_body($1, $2::integer)"
        let limit = String(maxPushMutations)
        router.post("/v1/push") { request, responder in
            guard let identity = responder.success(of: accounts.authenticate(request)) else { return }
            if let refusal = RequestBody.refusal(of: request.body) { return responder.respond(refusal.response) }
            // Checked UTF-8 above, so the decoding replaces nothing.
            let body = String(decoding: request.body, as: UTF8.self)
            let push = PostgresStatement(pushSQL, [body, limit], preparedName: "ferry_push")
            context.run(as: identity, [push], pushing: request.body.count, answering: responder) { result in
                switch result {
                case .success(let results):
                    guard let answer = results[0].bytes(0, 0) else {
                        return responder.respond(
                            APIError(
                                status: 413, code: "payload_too_large",
                                message: "a push carries at most \(maxPushMutations) mutations"
                            ).response)
                    }
                    responder.respond(.json(bytes: answer))
                case .failure(let error) where error.sqlState == SQLState.invalidParameterValue:
                    // ferry.push's own refusals of a malformed batch: their messages are for clients.
                    responder.respond(APIError.invalidRequest(error.message).response)
                case .failure(let error):
                    responder.respond(context.databaseFailure(error).response)
                }
            }
        }
        // ferry.pull runs in the statement's one snapshot (see sql/ferry/functions/pull.sql). The raw
        // cursor comes apart from the rest of the body, so the gateway seals it and
        // splices it in without parsing the JSON.
        let pullSQL = """
            select answer ->> 'cursor', (answer - 'cursor')::text from ferry.pull($1, $2::integer) answer
            """
        let cursors = self.cursors
        router.get("/v1/pull") { request, responder in
            guard let identity = responder.success(of: accounts.authenticate(request)) else { return }
            var limit = Self.defaultPullLimit
            var raw: String?  // ferry.pull's cursor text; nil for a first load
            do {
                if let text = try request.queryParameter("limit") {
                    guard let value = Int(text), (1...Self.maximumPullLimit).contains(value) else {
                        return responder.respond(
                            APIError.invalidRequest("limit must be an integer from 1 to \(Self.maximumPullLimit)")
                                .response)
                    }
                    limit = value
                }
            } catch {
                return responder.respond(APIError.invalidRequest("query parameter \(error)").response)
            }
            do {
                if let cursor = try request.queryParameter("cursor"), !cursor.isEmpty {
                    guard let opened = cursors.open(cursor, for: identity) else {
                        return responder.respond(APIError.invalidCursor.response)
                    }
                    raw = opened
                }
            } catch {
                return responder.respond(APIError.invalidCursor.response)
            }
            let pull = PostgresStatement(pullSQL, [raw, String(limit)], preparedName: "ferry_pull")
            context.run(as: identity, [pull], answering: responder) { result in
                switch result {
                case .success(let results):
                    guard let cursor = results[0].bytes(0, 0), var body = results[0].bytes(0, 1),
                        body.last == UInt8(ascii: "}")
                    else {
                        return responder.respond(APIError.unexpected.response)
                    }
                    body.removeLast()
                    body.append(contentsOf: #", "cursor": ""#.utf8)
                    body.append(contentsOf: cursors.seal(cursor, for: identity).utf8)
                    body.append(contentsOf: #""}"#.utf8)
                    responder.respond(.json(bytes: body))
                case .failure(let error) where raw != nil && error.sqlState == SQLState.cursorExpired:
                    responder.respond(APIError.cursorExpired.response)
                case .failure(let error) where raw != nil && Self.unreadableCursor.contains(error.sqlState ?? ""):
                    // Only a cursor we sealed reaches SQL, so this is one ferry.pull cannot read.
                    responder.respond(APIError.invalidCursor.response)
                case .failure(let error):
                    responder.respond(context.databaseFailure(error).response)
                }
            }
        }
        router.get("/v1/schema") { request, responder in
            guard let identity = responder.success(of: accounts.authenticate(request)) else { return }
            let schema = PostgresStatement("select ferry.table_schema()", preparedName: "ferry_table_schema")
            context.run(as: identity, [schema], answering: responder) { result in
                switch result {
                case .success(let results):
                    responder.respond(jsonBuiltIn: results[0])
                case .failure(let error):
                    responder.respond(context.databaseFailure(error).response)
                }
            }
        }
    }
}

extension SQLState {
    /// `FR409`, Ferry's own: what `ferry.pull` raises for a cursor the tombstone purges
    /// may have cut short (sql/ferry/functions/pull.sql), answered `409 cursor_expired`.
    static let cursorExpired = "FR409"
}
