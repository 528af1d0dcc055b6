import FerryAuth
import FerryHTTP
import FerryJSON
import FerryPostgres

/// `POST /v1/locks/:table/:key/claim|heartbeat|release` (PROTOCOL.md "Locks"), for
/// callers only: the identity statement and one of ``ClaimLock``, ``HeartbeatLock`` or
/// ``ReleaseLock`` in one pipeline. The SQL decides; its ``LockAnswer`` becomes the response.
struct LockRoutes {
    let accounts: Accounts

    /// Adds the routes for one loop; handlers use that loop's `context`.
    func register(in router: inout Router, context: LoopContext) {
        router.group(gate: accounts.callers) { routes in
            routes.post("/v1/locks/:table/:key/claim") { request, caller, responder in
                guard let body = responder.success(of: RequestBody.decode(ClaimRequest.self, from: request)),
                    let target = Self.target(request, responder)
                else { return }
                let claim = ClaimLock(table: target.table, key: target.key, force: body.force == true)
                Self.run(claim, as: caller, context: context, responder: responder)
            }
            routes.post("/v1/locks/:table/:key/heartbeat") { request, caller, responder in
                guard let target = Self.target(request, responder) else { return }
                Self.run(
                    HeartbeatLock(table: target.table, key: target.key), as: caller, context: context,
                    responder: responder)
            }
            routes.post("/v1/locks/:table/:key/release") { request, caller, responder in
                guard let target = Self.target(request, responder) else { return }
                Self.run(
                    ReleaseLock(table: target.table, key: target.key), as: caller, context: context,
                    responder: responder)
            }
        }
    }

    private struct ClaimRequest: Decodable {
        let force: Bool?
    }

    /// The table and key of the path (the router guarantees both segments).
    private static func target(_ request: HTTPRequest, _ responder: HTTPResponder) -> (table: String, key: String)? {
        guard let table = request.pathParameters["table"], let key = request.pathParameters["key"] else {
            responder.respond(APIError.unexpected.response)
            return nil
        }
        return (table, key)
    }

    private static func run<Query: DatabaseQuery>(
        _ query: Query, as caller: Identity, context: LoopContext, responder: HTTPResponder
    ) where Query.Answer == LockAnswer {
        context.run(query, as: caller, answering: responder) { result in
            switch result {
            case .success(let answer):
                if answer.cuesQueued { context.queuedCues.queued() }
                responder.respond(response(answer))
            case .failure(let failure): responder.respond(context.failure(failure).response)
            }
        }
    }

    /// The HTTP answer for a lock function's answer.
    static func response(_ answer: LockAnswer) -> HTTPResponse {
        let holder: HTTPResponse.ErrorDetail = answer.holder.map { .string($0) } ?? .null
        switch answer.status {
        case "ok":
            guard let holder = answer.holder else { return HTTPResponse(status: .noContent) }
            var body: [UInt8] = Array(#"{"holder":"#.utf8)
            JSONString.append(holder, to: &body)
            body.append(contentsOf: #","heartbeat_at":"#.utf8)
            JSONString.append(answer.heartbeatAt ?? "", to: &body)
            body.append(UInt8(ascii: "}"))
            return .json(bytes: body)
        case "lock_held":
            let age: HTTPResponse.ErrorDetail = answer.heartbeatAgeMilliseconds.map { .integer($0) } ?? .null
            return APIError(
                status: 409, code: "lock_held", message: "another device holds this lock",
                details: [("holder", holder), ("heartbeat_age_ms", age)]
            ).response
        case "lock_lost":
            return APIError(
                status: 409, code: "lock_lost", message: "this device no longer holds this lock",
                details: [("holder", holder)]
            ).response
        case "not_found":
            return APIError(status: 404, code: "not_found", message: answer.message ?? "no such lock table").response
        case "invalid":
            return APIError.invalidRequest(answer.message ?? "invalid lock key").response
        default:
            return APIError.unexpected.response
        }
    }
}
