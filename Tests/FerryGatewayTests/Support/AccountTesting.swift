import FerryAuth
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

// What the account tests share: a database migrated with `sql/ferry` and a gateway that
// logs in to it as the real `ferry_gateway` role (so grants and Row Level Security are
// exercised as in production), a JSON client over real HTTP, and the account steps of
// PROTOCOL.md as functions.

// MARK: - A migrated database

/// A ``MigratedDatabase`` with the account tests' own steps on it.
struct AccountsDatabase: Sendable {
    /// The database (dropped after the test).
    let database: TestDatabase
    /// A superuser connection: sees every row, bypasses Row Level Security.
    let admin: PostgresClient
    /// The database's URL with `ferry_gateway` as the user (the cluster trusts loopback).
    let gatewayURL: String

    /// Creates and migrates a database (with `sql/examples/<name>` for each of `examples`
    /// after Ferry's own SQL), runs `body`, drops the database.
    static func with<T>(examples: [String] = [], _ body: (AccountsDatabase) async throws -> T) async throws -> T {
        try await MigratedDatabase.with(prefix: "ferry_accounts", examples: examples) { migrated in
            try await body(
                AccountsDatabase(database: migrated.database, admin: migrated.admin, gatewayURL: migrated.gatewayURL))
        }
    }

    /// A new connection logged in as `ferry_gateway`, as the gateway's own are.
    func connectAsGateway(applicationName: String = "ferry-tests") async throws -> PostgresClient {
        try await PostgresClient.connect(
            PostgresConfiguration(gatewayURL, applicationName: applicationName, connectTimeoutMilliseconds: 30_000))
    }

    /// Makes `ferry.schema_version()` answer `version`, as a database migrated by another
    /// version of Ferry would (the function's grants stay).
    func setSchemaVersion(_ version: Int) async throws {
        try await admin.execute(
            "create or replace function ferry.schema_version() returns integer language sql immutable "
                + "as $$ select \(version) $$")
    }

    /// Every row of `sql` as text cells, read as the superuser.
    func rows(_ sql: String, _ parameters: [String?] = []) async throws -> [[String?]] {
        try await admin.query(sql, parameters).rows.map(\.values)
    }

    /// Backends of this database in `pg_sleep` now: a statement that the server's
    /// `statement_timeout` cut leaves none, one that only the client's deadline gave up on
    /// still sleeps.
    func sleepingBackends() async throws -> Int {
        Int(
            try await value(
                "select count(*) from pg_stat_activity where datname = current_database() and wait_event = 'PgSleep'")
                ?? "") ?? -1
    }

    /// The single value `sql` returns, read as the superuser.
    func value(_ sql: String, _ parameters: [String?] = []) async throws -> String? {
        let result = try await admin.query(sql, parameters)
        try #require(result.count == 1, "expected one row from: \(sql)")
        return result[0, 0]
    }

    /// The pid of the gateway backend whose query mentions `function` while it waits on a
    /// lock, polled for at most 60 s (bounded in count too; a loaded machine can take
    /// many seconds to get a request that far); nil when none showed up.
    func gatewayBackendWaitingOnALock(running function: String) async throws -> String? {
        try? await eventually("a gateway backend running \(function) waiting on a lock", seconds: 60) {
            try await admin.query(
                """
                select pid::text from pg_stat_activity
                where datname = current_database() and application_name = 'ferry'
                    and query like '%' || $1 || '%' and wait_event_type = 'Lock'
                """, [function]
            ).rows.first?[0]
        }
    }

    // MARK: Synced rows

    /// Creates `notes` (keyed within its owner) and registers it with
    /// `ferry.register_table(..., 'lww')`, as an operator's migration would: its sync
    /// columns (`_deleted` among them), triggers, RLS on the owner and grants are the
    /// real ones.
    func createNotes() async throws {
        try await admin.execute(
            """
            create table public.notes (id text, user_id uuid not null, body text, primary key (user_id, id));
            select ferry.register_table('public.notes', 'lww');
            """)
    }

    /// Inserts notes owned by `owner`: `(id, body)` live, or tombstones when `deleted`.
    func seedNotes(owner: String, _ notes: [(id: String, body: String)], deleted: Bool = false) async throws {
        for note in notes {
            _ = try await admin.query(
                "insert into public.notes (id, user_id, body, _deleted) values ($1, $2, $3, $4)",
                [note.id, owner, note.body, deleted ? "true" : "false"])
        }
    }

    /// Every note as `[user_id, id, body, _deleted]`, in key order.
    func notes() async throws -> [[String?]] {
        try await rows("select user_id::text, id, body, _deleted::text from public.notes order by user_id, id")
    }

    /// Notes of one owner as `[id, body, _deleted]`, by id.
    func notes(of owner: String) async throws -> [[String?]] {
        try await rows(
            "select id, body, _deleted::text from public.notes where user_id = $1 order by id", [owner])
    }

    // MARK: Accounts

    /// The account tables as they stand: users, sessions (with revocation), refresh tokens.
    func accountState() async throws -> [[String?]] {
        let users = try await rows("select 'user', id::text, email, password_hash from ferry.users order by id")
        let sessions = try await rows(
            """
            select 'session', id::text, user_id::text, device_id, (revoked_at is not null)::text
            from ferry.sessions order by id
            """)
        let tokens = try await rows(
            "select 'refresh', token_hash, session_id::text, (used_at is not null)::text from ferry.refresh_tokens order by 2"
        )
        return users + sessions + tokens
    }

    /// Whether the user has a row in `ferry.users`.
    func userExists(_ id: String) async throws -> Bool {
        try await value("select exists (select from ferry.users where id = $1)", [id]) == "t"
    }
}

// MARK: - Requests as SQL

extension AccountsDatabase {
    /// A new account row (anonymous), made as the superuser; returns its id.
    func newUser() async throws -> String {
        try #require(try await value("insert into ferry.users default values returning id::text"))
    }

    /// A connection logged in as `ferry_gateway` that runs statements as `user` on `device`,
    /// the way the gateway does: the identity statement and the work in one pipeline, with
    /// the gateway's default statement timeout unless `statementTimeout` (milliseconds) says.
    func connectAsClient(
        user: String, device: String = "device-1", statementTimeout: String = "10000"
    ) async throws -> RequestConnection {
        RequestConnection(
            client: try await connectAsGateway(), user: user, device: device, statementTimeout: statementTimeout)
    }
}

/// Statements run as one user's device: each in its own implicit transaction, switched to
/// `ferry_client` with `ferry.user_id` and `ferry.device_id` set, as the gateway runs them.
struct RequestConnection: Sendable {
    let client: PostgresClient
    let user: String
    let device: String
    /// `statement_timeout` in milliseconds, as the identity statement sets it.
    var statementTimeout = "10000"

    var identity: Identity {
        Identity(userID: user, sessionID: UUID().uuidString.lowercased(), deviceID: device, isAnonymous: true)
    }

    /// The identity statement as the gateway sends it.
    var identityStatement: PostgresStatement { identity.statement(timeout: statementTimeout) }

    /// Runs `sql` as this user and device.
    @discardableResult
    func query(_ sql: String, _ parameters: [String?] = []) async throws -> PostgresResult {
        try await client.pipeline([identityStatement, PostgresStatement(sql, parameters)])[1]
    }

    /// `ferry.push` with `{"mutations": mutations}`.
    func push(_ mutations: [[String: Any]]) async throws -> PushAnswer {
        let body = String(decoding: try JSONSerialization.data(withJSONObject: ["mutations": mutations]), as: UTF8.self)
        return try PushAnswer(try await query("select ferry.push($1::jsonb)", [body])[0, 0])
    }

    func close() async { await client.close() }
}

/// What `ferry.push` answered: `{"last_mutation_id", "results"}`.
struct PushAnswer: Sendable, CustomStringConvertible {
    let lastMutationID: Int
    /// Each result as `status`, or `rejected:<code>`, in order.
    let outcomes: [String]
    /// Each result's id, in order.
    let ids: [Int]
    /// Each rejection's message, by mutation id.
    let messages: [Int: String]
    let description: String

    init(_ text: String?) throws {
        let data = Data(try #require(text, "push returned null").utf8)
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any], "not an object")
        lastMutationID = try #require(object["last_mutation_id"] as? Int, "no last_mutation_id in \(text ?? "")")
        let results = try #require(object["results"] as? [[String: Any]], "no results in \(text ?? "")")
        outcomes = results.map { result in
            let status = result["status"] as? String ?? "?"
            return status == "rejected" ? "rejected:\(result["code"] as? String ?? "?")" : status
        }
        ids = results.map { $0["id"] as? Int ?? -1 }
        messages = Dictionary(
            results.compactMap { result in
                (result["message"] as? String).map { (result["id"] as? Int ?? -1, $0) }
            }, uniquingKeysWith: { first, _ in first })
        description = text ?? ""
    }
}

// MARK: - A gateway on it

/// A gateway logged in as `ferry_gateway` to a migrated database.
struct AccountsGateway: Sendable {
    let database: AccountsDatabase
    let gateway: Gateway
    let port: Int
}

/// Creates a migrated database (with the example apps named in `examples`, e.g.
/// `["puzzle"]`), starts a gateway on it as `ferry_gateway` (with `arguments` added to the
/// test defaults), runs `body`, stops and drops both.
func withAccountsGateway<T>(
    arguments: [String] = [], createNotes: Bool = false, examples: [String] = [],
    _ body: (AccountsGateway) async throws -> T
) async throws -> T {
    try await AccountsDatabase.with(examples: examples) { database in
        if createNotes { try await database.createNotes() }
        return try await withStartedGateway(databaseURL: database.gatewayURL, arguments: arguments) { gateway, port in
            try await body(AccountsGateway(database: database, gateway: gateway, port: port))
        }
    }
}

// MARK: - The account steps

/// What a client holds after signing up or in.
struct TestSession: Sendable {
    let userID: String
    let accessToken: String
    let refreshToken: String
    let deviceID: String

    /// The session id (`sid`) inside the access token.
    var sessionID: String { claims["sid"] as? String ?? "" }

    /// The access token's claims, decoded without checking the signature.
    var claims: [String: Any] { decodeClaims(accessToken) }
}

/// The payload of a JWT, decoded without checking anything.
func decodeClaims(_ token: String) -> [String: Any] {
    let parts = token.split(separator: ".", omittingEmptySubsequences: false)
    guard parts.count == 3, let bytes = Base64URL.decode(parts[1]),
        let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
    else { return [:] }
    return object
}

extension AccountsGateway {
    func call(
        _ method: String, _ path: String, token: String? = nil, json: [String: Any]? = nil, body: [UInt8]? = nil,
        headers: [(String, String)] = [], source: String? = nil
    ) async throws -> APIResponse {
        try await FerryTestSupport.call(
            method, path, port: port, token: token, json: json, body: body, headers: headers, source: source)
    }

    /// `POST /v1/auth/anonymous`, required to answer 201.
    func signUpAnonymous(device: String = UUID().uuidString.lowercased()) async throws -> TestSession {
        let response = try await call("POST", "/v1/auth/anonymous", json: ["device_id": device])
        try #require(response.status == 201, "anonymous sign-up: \(response)")
        return try session(from: response, device: device)
    }

    /// `POST /v1/auth/link` with `email` and `password`.
    func link(_ session: TestSession, email: String, password: String) async throws -> APIResponse {
        try await call(
            "POST", "/v1/auth/link", token: session.accessToken, json: ["email": email, "password": password])
    }

    /// An email account: an anonymous sign-up on its own device, linked to `email`.
    func emailAccount(_ email: String, password: String = "correct horse battery") async throws -> TestSession {
        let anonymous = try await signUpAnonymous()
        let linked = try await link(anonymous, email: email, password: password)
        try #require(linked.status == 200, "link: \(linked)")
        return anonymous
    }

    /// `POST /v1/auth/signin`, with the device's anonymous session as Bearer when given.
    func signIn(
        email: String, password: String, device: String = UUID().uuidString.lowercased(), bearer: String? = nil,
        resolve: String? = nil, source: String? = nil
    ) async throws -> APIResponse {
        var body: [String: Any] = ["email": email, "password": password, "device_id": device]
        if let resolve { body["resolve"] = resolve }
        return try await call("POST", "/v1/auth/signin", token: bearer, json: body, source: source)
    }

    /// `GET /v1/auth/user` with `token`.
    func me(_ token: String) async throws -> APIResponse {
        try await call("GET", "/v1/auth/user", token: token)
    }

    /// `POST /v1/auth/refresh`.
    func refresh(_ refreshToken: String) async throws -> APIResponse {
        try await call("POST", "/v1/auth/refresh", json: ["refresh_token": refreshToken])
    }

    /// The session in a `{"user", "session"}` answer.
    func session(from response: APIResponse, device: String) throws -> TestSession {
        TestSession(
            userID: try #require(response.string("user", "id"), "no user.id in \(response)"),
            accessToken: try #require(response.string("session", "access_token"), "no access_token in \(response)"),
            refreshToken: try #require(response.string("session", "refresh_token"), "no refresh_token in \(response)"),
            deviceID: device)
    }
}
