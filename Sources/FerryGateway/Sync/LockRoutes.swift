import FerryAuth
import FerryHTTP
import FerryJSON
import FerryPostgres
import Foundation

/// `POST /v1/locks/:table/:key/claim|heartbeat|release` (PROTOCOL.md "Locks"): the identity
/// statement and one call of `ferry.claim_lock`, `ferry.heartbeat_lock` or
/// `ferry.release_lock` in one pipeline. The SQL decides; its small `{"status", …}` answer
/// becomes the response.
struct LockRoutes {
    let accounts: Accounts

    /// Adds the routes for one loop; handlers use that loop's `context`.
    func register(in router: inout Router, context: LoopContext) {
        let accounts = self.accounts
        router.post("/v1/locks/:table/:key/claim") { request, responder in
            guard let identity = responder.success(of: accounts.authenticate(request)),
                let body = responder.success(of: RequestBody.decode(ClaimRequest.self, from: request)),
                let target = Self.target(request, responder)
            else { return }
            let claim = PostgresStatement(
                "select ferry.claim_lock($1, $2, $3::boolean)",
                [target.table, target.key, body.force == true ? "true" : "false"],
                preparedName: "ferry_claim_lock")
            Self.run(claim, as: identity, context: context, accounts: accounts, responder: responder)
        }
        router.post("/v1/locks/:table/:key/heartbeat") { request, responder in
            guard let identity = responder.success(of: accounts.authenticate(request)),
                let target = Self.target(request, responder)
            else { return }
            let heartbeat = PostgresStatement(
                "select ferry.heartbeat_lock($1, $2)", [target.table, target.key], preparedName: "ferry_heartbeat_lock")
            Self.run(heartbeat, as: identity, context: context, accounts: accounts, responder: responder)
        }
        router.post("/v1/locks/:table/:key/release") { request, responder in
            guard let identity = responder.success(of: accounts.authenticate(request)),
                let target = Self.target(request, responder)
            else { return }
            let release = PostgresStatement(
                "select ferry.release_lock($1, $2)", [target.table, target.key], preparedName: "ferry_release_lock")
            Self.run(release, as: identity, context: context, accounts: accounts, responder: responder)
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

    private static func run(
        _ statement: PostgresStatement, as identity: Identity, context: LoopContext, accounts: Accounts,
        responder: HTTPResponder
    ) {
        context.run(as: identity, [statement], answering: responder) { result in
            switch result {
            case .success(let results):
                responder.respond(response(results[0].bytes(0, 0)))
            case .failure(let error):
                responder.respond(context.databaseFailure(error).response)
            }
        }
    }

    /// The HTTP answer for a lock function's `{"status", …}`.
    static func response(_ bytes: [UInt8]?) -> HTTPResponse {
        guard let bytes, let answer = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
            let status = answer["status"] as? String
        else { return APIError.unexpected.response }
        let holder: HTTPResponse.ErrorDetail = (answer["holder"] as? String).map { .string($0) } ?? .null
        let message = answer["message"] as? String
        switch status {
        case "ok" where answer["holder"] == nil:
            return HTTPResponse(status: .noContent)
        case "ok":
            var body: [UInt8] = Array(#"{"holder":"#.utf8)
            JSONString.append(answer["holder"] as? String ?? "", to: &body)
            body.append(contentsOf: #","heartbeat_at":"#.utf8)
            JSONString.append(answer["heartbeat_at"] as? String ?? "", to: &body)
            body.append(UInt8(ascii: "}"))
            return .json(bytes: body)
        case "lock_held":
            let age: HTTPResponse.ErrorDetail = (answer["heartbeat_age_ms"] as? Int).map { .integer($0) } ?? .null
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
            return APIError(status: 404, code: "not_found", message: message ?? "no such lock table").response
        case "invalid":
            return APIError.invalidRequest(message ?? "invalid lock key").response
        default:
            return APIError.unexpected.response
        }
    }
}
