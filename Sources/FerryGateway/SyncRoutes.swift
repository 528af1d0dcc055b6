import FerryHTTP
import FerryPostgres

/// `POST /v1/push` and `GET /v1/schema`: each is the identity statement and one SQL
/// function call in one pipeline; PostgreSQL builds the JSON answer and the gateway
/// forwards its bytes.
struct SyncRoutes {
    let accounts: Accounts
    let maxPushMutations: Int

    /// Adds the routes for one loop; handlers use that loop's `worker`.
    func register(in router: inout Router, worker: Worker) {
        let accounts = self.accounts
        // The limit is checked in the same statement, so an oversized batch costs no
        // parse in the gateway and writes nothing.
        let pushSQL = """
            select case when pg_catalog.jsonb_typeof(body -> 'mutations') = 'array'
                    and pg_catalog.jsonb_array_length(body -> 'mutations') > \(maxPushMutations)
                then null else ferry.push(body) end
            from (select $1::jsonb as body) request
            """
        router.post("/v1/push") { request, responder in
            guard let identity = responder.success(of: accounts.authenticate(request)) else { return }
            let body = String(decoding: request.body, as: UTF8.self)
            let push = PostgresStatement(pushSQL, [body], preparedName: "ferry_push")
            worker.run(as: identity, [push]) { result in
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
                case .failure(let error) where error.sqlState == "22P02":
                    responder.respond(APIError.invalidJSON("the body is not valid JSON").response)
                case .failure(let error) where error.sqlState == "22023":
                    // ferry.push's own refusals of a malformed batch: their messages are for clients.
                    responder.respond(APIError.invalidRequest(error.message).response)
                case .failure(let error):
                    responder.respond(accounts.databaseFailure(error).response)
                }
            }
        }
        router.get("/v1/schema") { request, responder in
            guard let identity = responder.success(of: accounts.authenticate(request)) else { return }
            let schema = PostgresStatement("select ferry.table_schema()", preparedName: "ferry_table_schema")
            worker.run(as: identity, [schema]) { result in
                switch result {
                case .success(let results):
                    guard let answer = results[0].bytes(0, 0) else {
                        return responder.respond(APIError.unexpected.response)
                    }
                    responder.respond(.json(bytes: answer))
                case .failure(let error):
                    responder.respond(accounts.databaseFailure(error).response)
                }
            }
        }
    }
}
