import FerryAuth
import FerryTestSupport
import Foundation
import Glibc
import Testing

@testable import FerryClient

// What the CueStream tests against a real gateway share: a database migrated with
// Ferry's SQL and the `tasks` example, an in-process gateway on it that can be
// restarted on its port, the account steps over HTTP, and a log of a stream's events.

/// A ``TestGateway`` on a migrated test database, on a fixed loopback port so a
/// restarted one is at the same address.
actor StreamTestGateway {
    let port: Int
    private let gateway: TestGateway

    /// Creates and migrates a database (Ferry's SQL and the `tasks` example), starts a
    /// gateway on it as `ferry_gateway` with `arguments` added, runs `body`, stops and
    /// drops both.
    static func with<T>(arguments: [String] = [], _ body: (StreamTestGateway) async throws -> T) async throws -> T {
        try await MigratedDatabase.with(prefix: "ferry_client", examples: ["tasks"]) { database in
            let port = try freePort()
            // One loop of four connections: the suite's gateways share one PostgreSQL.
            let gateway = StreamTestGateway(
                port: port,
                gateway: TestGateway(
                    databaseURL: database.gatewayURL, arguments: ["--threads", "1"] + arguments, port: port))
            do {
                try await gateway.start()
                let value = try await body(gateway)
                await gateway.stop()
                return value
            } catch {
                await gateway.stop()
                throw error
            }
        }
    }

    private init(port: Int, gateway: TestGateway) {
        self.port = port
        self.gateway = gateway
    }

    /// The URL a client is configured with.
    nonisolated var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// Starts the gateway (after ``stop()``, again on the same port).
    func start() async throws { try await gateway.start() }

    /// Shuts the gateway down (its streams close `1001`).
    func stop() async { await gateway.stop() }

    // MARK: - The account steps

    /// `POST /v1/auth/anonymous` on a new device.
    func signUp() async throws -> StreamTestSession {
        let device = UUID().uuidString.lowercased()
        let response = try await call("POST", "/v1/auth/anonymous", port: port, json: ["device_id": device])
        try #require(response.status == 201, "sign-up: \(response)")
        return try StreamTestSession(response, deviceID: device)
    }

    /// A second device of `session`'s user: links an email to it, signs in elsewhere.
    func anotherDevice(of session: StreamTestSession) async throws -> StreamTestSession {
        let email = "stream-\(UUID().uuidString.prefix(8).lowercased())@example.com"
        let password = "correct horse battery"
        let linked = try await call(
            "POST", "/v1/auth/link", port: port, token: session.accessToken,
            json: ["email": email, "password": password])
        try #require(linked.status == 200, "link: \(linked)")
        let device = UUID().uuidString.lowercased()
        let signedIn = try await call(
            "POST", "/v1/auth/signin", port: port, json: ["email": email, "password": password, "device_id": device])
        try #require(signedIn.status == 200, "sign-in: \(signedIn)")
        return try StreamTestSession(signedIn, deviceID: device)
    }

    /// `POST /v1/auth/refresh`: the session with its rotated tokens.
    func refresh(_ session: StreamTestSession) async throws -> StreamTestSession {
        let response = try await call(
            "POST", "/v1/auth/refresh", port: port, json: ["refresh_token": session.refreshToken])
        try #require(response.status == 200, "refresh: \(response)")
        return try StreamTestSession(response, deviceID: session.deviceID)
    }

    /// Upserts task `id` as `session`'s device.
    func pushTask(_ session: StreamTestSession, id: String) async throws {
        let response = try await call(
            "POST", "/v1/push", port: port, token: session.accessToken,
            json: [
                "mutations": [
                    ["id": Int.random(in: 1...1_000_000), "table": "tasks", "op": "upsert", "row": ["id": id]]
                ]
            ])
        try #require(response.status == 200, "push: \(response)")
    }

    /// A token for `session` signed with the gateways' secret that ends `seconds` from now.
    nonisolated func token(for session: StreamTestSession, endingIn seconds: Int) throws -> String {
        let now = Int(Date().timeIntervalSince1970)
        return try signedAccessToken(
            secret: testSecret, userID: session.userID, sessionID: session.sessionID,
            deviceID: session.deviceID, isAnonymous: true, now: now, expiresAt: now + seconds)
    }

    /// The streams the gateway holds open, from `/metrics`.
    func streamsOpen() async throws -> Int {
        metricTotal("ferry_streams_open", in: try await call("GET", "/metrics", port: port).raw.text)
    }
}

/// What a client holds after signing up or in.
struct StreamTestSession: Sendable {
    let userID: String
    let accessToken: String
    let refreshToken: String
    let deviceID: String

    /// The session id: the access token's `sid`.
    var sessionID: String {
        let parts = accessToken.split(separator: ".")
        guard parts.count == 3 else { return "" }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        let claims = Data(base64Encoded: base64).flatMap { try? JSONSerialization.jsonObject(with: $0) }
        return (claims as? [String: Any])?["sid"] as? String ?? ""
    }

    init(_ response: APIResponse, deviceID: String) throws {
        userID = try #require(response.string("user", "id"), "no user.id in \(response)")
        accessToken = try #require(response.string("session", "access_token"), "no access_token in \(response)")
        refreshToken = try #require(response.string("session", "refresh_token"), "no refresh_token in \(response)")
        self.deviceID = deviceID
    }
}

/// The `accessToken` closure of a ``CueStream`` for one session: `accessToken(false)`
/// hands out `first` once (a short-lived token, say) and then the current token;
/// `accessToken(true)` refreshes the session at the gateway. Counts both.
actor StreamTestTokens {
    private let gateway: StreamTestGateway
    private var session: StreamTestSession
    private var first: String?
    private(set) var requests = 0
    private(set) var refreshes = 0

    init(_ gateway: StreamTestGateway, _ session: StreamTestSession, first: String? = nil) {
        self.gateway = gateway
        self.session = session
        self.first = first
    }

    func token(forceRefresh: Bool) async throws -> String {
        requests += 1
        if forceRefresh {
            refreshes += 1
            session = try await gateway.refresh(session)
        } else if let first {
            self.first = nil
            return first
        }
        return session.accessToken
    }

    /// A ``CueStream`` for this session on `gateway`, over SSE unless told otherwise.
    func stream(
        openTimeout: Duration = .seconds(15), serverURL: URL? = nil
    ) -> CueStream {
        CueStream(
            configuration: CueStream.Configuration(
                serverURL: serverURL ?? gateway.url, transport: .serverSentEvents, openTimeout: openTimeout),
            accessToken: { force in try await self.token(forceRefresh: force) })
    }
}

/// Every event a stream reported, collected by a task of its own.
actor StreamEventLog {
    private(set) var events: [CueStream.Event] = []
    private var reader: Task<Void, Never>?

    /// Starts reading `stream`'s events (its one consumer).
    static func reading(_ stream: CueStream) async -> StreamEventLog {
        let log = StreamEventLog()
        await log.read(stream.events)
        return log
    }

    private func read(_ events: AsyncStream<CueStream.Event>) {
        reader = Task { [weak self] in
            for await event in events { await self?.append(event) }
        }
    }

    private func append(_ event: CueStream.Event) { events.append(event) }

    /// Stops reading.
    func close() async {
        reader?.cancel()
        await reader?.value
    }

    /// How many events are `event`.
    func count(_ event: CueStream.Event) -> Int { events.filter { $0 == event }.count }

    /// How many events match `predicate`.
    func count(where predicate: (CueStream.Event) -> Bool) -> Int { events.filter(predicate).count }

    /// Waits (bounded) until `count` events are `event`.
    /// (A minute unless told: on a loaded machine URLSession's own queues wait their turn.)
    nonisolated func waitFor(_ event: CueStream.Event, count: Int = 1, seconds: Double = 60) async throws {
        do {
            try await eventually("\(count) × \(event)", seconds: seconds) { await self.count(event) >= count }
        } catch {
            Issue.record("the events: \(await events)")
            throw error
        }
    }
}
