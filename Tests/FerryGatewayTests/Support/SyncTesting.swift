import FerryTestSupport
import Foundation
import Testing

// What the sync suites share: pulls and pushes over HTTP, decoded.

// MARK: - Pull

/// A pull answer, decoded.
///
/// Its page (`cursor`, `has_more`, `last_mutation_id`, `changes`) is read only out of a
/// `200`: reading it out of an error answer, which has none and so would read as an
/// empty page with no cursor, records an issue naming the answer. Check `status` (and
/// `response.code`) of answers that are meant to be errors.
struct PullPage {
    let response: APIResponse

    var status: Int { response.status }
    var cursor: String? { page["cursor"] as? String }
    var hasMore: Bool? { page["has_more"] as? Bool }
    var lastMutationID: Int? { page["last_mutation_id"] as? Int }
    var tables: [String] { ((page["changes"] as? [String: Any])?.keys).map { $0.sorted() } ?? [] }
    var rowCount: Int { tables.reduce(0) { $0 + upserts($1).count + deletes($1).count } }

    func upserts(_ table: String) -> [[String: Any]] {
        (page["changes"] as? [String: Any]).flatMap { $0[table] as? [String: Any] }?["upserts"] as? [[String: Any]]
            ?? []
    }

    func deletes(_ table: String) -> [[String: Any]] {
        (page["changes"] as? [String: Any]).flatMap { $0[table] as? [String: Any] }?["deletes"] as? [[String: Any]]
            ?? []
    }

    /// The body of a `200`; anything else is recorded as an issue and reads as `[:]`.
    private var page: [String: Any] {
        guard response.status == 200, let object = response.object else {
            Issue.record("read a pull page out of an answer that is not one: \(response)")
            return [:]
        }
        return object
    }
}

extension AccountsGateway {
    /// `GET /v1/pull` as `session`.
    func pull(_ session: TestSession, cursor: String? = nil, limit: Int? = nil) async throws -> PullPage {
        var query: [String] = []
        if let cursor { query.append("cursor=\(cursor)") }
        if let limit { query.append("limit=\(limit)") }
        let path = "/v1/pull" + (query.isEmpty ? "" : "?" + query.joined(separator: "&"))
        return PullPage(response: try await call("GET", path, token: session.accessToken))
    }

    /// `POST /v1/push` of `items` mutations as `session`, required to apply them all.
    func push(_ session: TestSession, _ mutations: [(id: Int, op: String, row: [String: Any])]) async throws {
        let body = mutations.map { mutation -> [String: Any] in
            [
                "id": mutation.id, "table": "items", "op": mutation.op,
                (mutation.op == "delete" ? "key" : "row"): mutation.row,
            ]
        }
        let response = try await call("POST", "/v1/push", token: session.accessToken, json: ["mutations": body])
        let statuses = (response.value("results") as? [[String: Any]])?.map { $0["status"] as? String }
        try #require(statuses == Array(repeating: "applied", count: mutations.count), "push: \(response)")
    }
}

// MARK: - Push

/// A push answer, decoded: the response, each result as `status` or `rejected:<code>`.
struct PushResponse {
    let response: APIResponse

    var outcomes: [String] {
        (response.value("results") as? [[String: Any]] ?? []).map { result in
            let status = result["status"] as? String ?? "?"
            return status == "rejected" ? "rejected:\(result["code"] as? String ?? "?")" : status
        }
    }
    var lastMutationID: Int? { response.value("last_mutation_id") as? Int }
}

extension AccountsGateway {
    /// `POST /v1/push` of `mutations` as `session`.
    func pushBatch(_ session: TestSession, _ mutations: [[String: Any]]) async throws -> PushResponse {
        PushResponse(
            response: try await call("POST", "/v1/push", token: session.accessToken, json: ["mutations": mutations]))
    }

    /// Two devices of one email account: the first made by sign-up and link, the second
    /// by signing in on a new device.
    func twoDevices(
        email: String, password: String = "correct horse battery"
    ) async throws -> (TestSession, TestSession) {
        let first = try await emailAccount(email, password: password)
        let device = UUID().uuidString.lowercased()
        let signedIn = try await signIn(email: email, password: password, device: device)
        try #require(signedIn.status == 200, "sign-in: \(signedIn)")
        let second = try session(from: signedIn, device: device)
        try #require(second.userID == first.userID)
        return (first, second)
    }
}
