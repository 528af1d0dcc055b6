import FerryAuth
import FerryTestSupport
import Foundation
import Testing

/// A sharded deployment in its production shape, every request through haproxy
/// (deploy/haproxy-shards.cfg; no client talks to a gateway directly): two PostgreSQL
/// clusters, each a shard (0 and 1) with its own `ferry serve` and JWT secret; one email
/// directory database given to every gateway (`FERRY_DIRECTORY_DATABASE_URL`, with
/// `FERRY_SHARD_URLS` naming each shard's gateway); the puzzle example's shared table
/// `daily_puzzles` written at shard 0's cluster, the origin (`wal_level = logical`), and
/// received by shard 1's by logical replication. Sign-ups land on both shards, an email
/// is unique across them, a sign-in without a bearer reaches its account's shard and
/// its session works there, and an origin's row cues and reaches a device of each shard.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct TwoClustersTests {
    @Test func signUpsEmailsSignInsAndSharedRowsAcrossTwoClusters() async throws {
        try await TwoClusters.with { clusters in
            let users = try await clusters.signUpsLandOnBothShards()
            try await clusters.anEmailIsUniqueAcrossShards(users)
            try await clusters.aSignInWithoutABearerReachesTheAccountsShard(users)
            try await clusters.anOriginsRowCuesAndReachesBothShards(users)
            try await clusters.aFirstSignInWithADeviceSessionCrossesShards(users)
        }
    }
}

/// The suite's deployment: `clusters[N]` is shard N's cluster; shard 0's is the origin.
private struct TwoClusters: Sendable {
    /// haproxy's port: every request of the suite goes there.
    let port: Int
    let clusters: [ScratchCluster]
    let directory: MigratedDirectory
    let replication: SharedTablesReplication

    /// The email each shard's first user links.
    static let emails = ["ann@example.com", "bo@example.com"]
    static let password = "correct horse battery"

    /// Two scratch clusters migrated with the puzzle example, the origin publishing
    /// `daily_puzzles` and the other receiving it (``SharedTablesReplication``), the
    /// second set to shard 1; a directory database on the test server; a gateway per
    /// shard and haproxy in front (``HAProxyFront/withShards(databaseURLs:environment:_:)``).
    /// Five processes: two PostgreSQL servers, two gateways, haproxy.
    static func with(_ body: (TwoClusters) async throws -> Void) async throws {
        try await SharedTablesReplication.with(subscribers: 1) { replication in
            let clusters = [replication.origin] + replication.subscribers
            try await clusters[1].sql("select ferry.set_shard(1)")
            try await MigratedDirectory.with { directory in
                try await HAProxyFront.withShards(
                    databaseURLs: clusters.map { $0.url(database: "ferry", user: "ferry_gateway") },
                    environment: { _, ports in
                        [
                            "FERRY_DIRECTORY_DATABASE_URL": directory.gatewayURL,
                            "FERRY_SHARD_URLS": ports.enumerated().map { "\($0.offset)=http://127.0.0.1:\($0.element)" }
                                .joined(separator: ","),
                        ]
                    }
                ) { port, _ in
                    try await body(
                        TwoClusters(port: port, clusters: clusters, directory: directory, replication: replication))
                }
            }
        }
    }

    /// A request through haproxy.
    func call(_ method: String, _ path: String, token: String? = nil, json: [String: Any]? = nil) async throws
        -> APIResponse
    {
        try await HAProxyFront.call(method, path, port: port, token: token, json: json)
    }

    /// Whether shard `shard`'s cluster has the user.
    func userExists(_ id: String, onShard shard: Int) async throws -> Bool {
        try await clusters[shard].value("select exists (select from ferry.users where id = $1)", [id]) == "t"
    }

    // MARK: - Steps

    /// Anonymous sign-ups (haproxy's round robin) land on both shards, each user in its
    /// own shard's cluster only; returns two users of each shard, by shard.
    func signUpsLandOnBothShards() async throws -> [[TestSession]] {
        var users: [[TestSession]] = [[], []]
        var signUps = 0
        while users.contains(where: { $0.count < 2 }) && signUps < 12 {
            signUps += 1
            let session = try await HAProxyFront.signUp(port: port)
            let shard = Shard.of(try #require(UUID(uuidString: session.userID)))
            try #require(shard == 0 || shard == 1, "user \(session.userID) of shard \(shard)")
            #expect(try await userExists(session.userID, onShard: shard), "user of shard \(shard) is there")
            #expect(try await !userExists(session.userID, onShard: 1 - shard), "and only there")
            users[shard].append(session)
        }
        try #require(users.allSatisfy { $0.count >= 2 }, "sign-ups by shard: \(users.map(\.count))")
        return users
    }

    /// The first user of each shard links its email, which the directory gives to that
    /// shard and user; the other shard's second (anonymous) user linking the same email is
    /// `409 email_in_use` and gets nothing.
    func anEmailIsUniqueAcrossShards(_ users: [[TestSession]]) async throws {
        for shard in 0...1 {
            let email = Self.emails[shard]
            let linked = try await call(
                "POST", "/v1/auth/link", token: users[shard][0].accessToken,
                json: ["email": email, "password": Self.password])
            #expect(linked.status == 200, "link on shard \(shard): \(linked)")
            let row = try await directory.row(email)
            #expect(
                row?.shard == shard && row?.user == users[shard][0].userID && row?.state == "linked",
                "\(String(describing: row))")
        }
        for shard in 0...1 {
            let other = users[1 - shard][1]
            let refused = try await call(
                "POST", "/v1/auth/link", token: other.accessToken,
                json: ["email": Self.emails[shard], "password": Self.password])
            #expect(refused.status == 409 && refused.code == "email_in_use", "shard \(1 - shard): \(refused)")
            let email = try await clusters[1 - shard].value(
                "select email from ferry.users where id = $1", [other.userID])
            #expect(email == nil, "\(String(describing: email))")
            #expect(try await directory.row(Self.emails[shard])?.user == users[shard][0].userID)
        }
    }

    /// A sign-in without a bearer takes haproxy's default route, shard 0: shard 0's gateway
    /// answers its own account and forwards the other's to shard 1 (the directory names
    /// it), whose session then pushes, pulls and refreshes on shard 1 through haproxy.
    func aSignInWithoutABearerReachesTheAccountsShard(_ users: [[TestSession]]) async throws {
        for shard in 0...1 {
            let device = UUID().uuidString.lowercased()
            let signedIn = try await call(
                "POST", "/v1/auth/signin",
                json: ["email": Self.emails[shard], "password": Self.password, "device_id": device])
            #expect(signedIn.status == 200, "sign-in of shard \(shard): \(signedIn)")
            #expect(signedIn.string("user", "id") == users[shard][0].userID)
            let access = try #require(signedIn.string("session", "access_token"))
            let refresh = try #require(signedIn.string("session", "refresh_token"))
            #expect(shard == 0 ? !refresh.contains(".") : refresh.hasPrefix("1."), "\(refresh)")

            let username = "player-\(shard)"
            let pushed = try await call(
                "POST", "/v1/push", token: access,
                json: [
                    "mutations": [["id": 1, "table": "profiles", "op": "upsert", "row": ["username": username]]]
                ])
            #expect(pushed.status == 200, "push of shard \(shard): \(pushed)")
            let profile = "select username from public.profiles where user_id = $1"
            #expect(try await clusters[shard].value(profile, [users[shard][0].userID]) == username)
            #expect(try await clusters[1 - shard].value(profile, [users[shard][0].userID]) == nil)
            let pulled = PullPage(response: try await call("GET", "/v1/pull", token: access))
            #expect(pulled.upserts("profiles").map { $0["username"] as? String } == [username], "shard \(shard)")
            let refreshed = try await call("POST", "/v1/auth/refresh", json: ["refresh_token": refresh])
            #expect(refreshed.status == 200, "refresh of shard \(shard): \(refreshed)")
        }
        // A wrong password is answered, and counted, by the account's shard only: shard 0
        // forwards before it checks anything.
        let wrong = try await call(
            "POST", "/v1/auth/signin",
            json: [
                "email": Self.emails[1], "password": "not the password", "device_id": UUID().uuidString.lowercased(),
            ])
        #expect(wrong.status == 401 && wrong.code == "invalid_credentials", "\(wrong)")
        let attempts = "select string_agg(outcome, ',' order by id) from ferry.sign_in_attempts where email = $1"
        #expect(try await clusters[1].value(attempts, [Self.emails[1]]) == "signed_in,failed")
        #expect(try await clusters[0].value(attempts, [Self.emails[1]]) == nil)
    }

    /// An operator's insert at the origin cues a stream held on each shard (a WebSocket on
    /// shard 0, where it is written; server-sent events on shard 1, where replication
    /// applies it), and each stream's user pulls the row.
    func anOriginsRowCuesAndReachesBothShards(_ users: [[TestSession]]) async throws {
        let holders: [(session: TestSession, transport: StreamTestClient.Transport)] = [
            (users[0][1], .webSocket), (users[1][1], .serverSentEvents),
        ]
        var cursors: [String] = []
        var streams: [StreamTestClient] = []
        defer { for stream in streams { stream.close() } }
        let port = port
        for (session, transport) in holders {
            let first = PullPage(response: try await call("GET", "/v1/pull", token: session.accessToken))
            #expect(first.upserts("daily_puzzles").isEmpty)
            cursors.append(try #require(first.cursor))
            let stream = try await offload {
                try StreamTestClient(port: port, transport: transport, token: session.accessToken, timeout: 30)
            }
            streams.append(stream)
            _ = try await stream.nextMessageAsync(ofType: "hello")
        }

        let grid = String(repeating: "7", count: 81)
        try await replication.origin.sql(
            "insert into public.daily_puzzles (day, grid) values ('2026-03-01', '\(grid)')")
        for (shard, stream) in streams.enumerated() {
            let cue = try await stream.nextMessageAsync(ofType: "cue")
            #expect(cue.strings("tables") == ["daily_puzzles"], "shard \(shard), \(holders[shard].transport)")
            let next = PullPage(
                response: try await call(
                    "GET", "/v1/pull?cursor=\(cursors[shard])", token: holders[shard].session.accessToken))
            #expect(next.upserts("daily_puzzles").map { $0["grid"] as? String } == [grid], "shard \(shard)")
        }
    }

    /// A device whose anonymous user is on shard 0 (its Bearer routes it there) and owns a
    /// row signs in to shard 1's account: `resolution_required` with both counts, then
    /// `keep_device_across_shards`, both changing nothing; `keep_cloud` signs in on
    /// shard 1 (`reset: true`) and deletes the anonymous user and its row on shard 0.
    func aFirstSignInWithADeviceSessionCrossesShards(_ users: [[TestSession]]) async throws {
        var device: TestSession?
        for _ in 0..<12 where device == nil {
            let session = try await HAProxyFront.signUp(port: port)
            if Shard.of(try #require(UUID(uuidString: session.userID))) == 0 { device = session }
        }
        let anonymous = try #require(device, "no sign-up landed on shard 0")
        let pushed = try await call(
            "POST", "/v1/push", token: anonymous.accessToken,
            json: ["mutations": [["id": 1, "table": "profiles", "op": "upsert", "row": ["username": "guest"]]]])
        #expect(pushed.status == 200, "\(pushed)")
        let signIn: [String: Any] = [
            "email": Self.emails[1], "password": Self.password, "device_id": anonymous.deviceID,
        ]

        let unresolved = try await call("POST", "/v1/auth/signin", token: anonymous.accessToken, json: signIn)
        #expect(unresolved.status == 409 && unresolved.code == "resolution_required", "\(unresolved)")
        #expect(unresolved.value("error", "device_rows") as? Int == 1, "\(unresolved)")
        #expect(unresolved.value("error", "cloud_rows") as? Int == 1, "shard 1's profile: \(unresolved)")
        var keepDevice = signIn
        keepDevice["resolve"] = "keep_device"
        let refused = try await call("POST", "/v1/auth/signin", token: anonymous.accessToken, json: keepDevice)
        #expect(refused.status == 409 && refused.code == "keep_device_across_shards", "\(refused)")
        #expect(try await userExists(anonymous.userID, onShard: 0), "nothing changed")

        var keepCloud = signIn
        keepCloud["resolve"] = "keep_cloud"
        let signedIn = try await call("POST", "/v1/auth/signin", token: anonymous.accessToken, json: keepCloud)
        #expect(signedIn.status == 200, "\(signedIn)")
        #expect(signedIn.string("user", "id") == users[1][0].userID)
        #expect(signedIn.value("reset") as? Bool == true, "\(signedIn)")
        #expect(try #require(signedIn.string("session", "refresh_token")).hasPrefix("1."))
        #expect(try await !userExists(anonymous.userID, onShard: 0), "the anonymous user is gone")
        #expect(
            try await clusters[0].value("select count(*) from public.profiles where user_id = $1", [anonymous.userID])
                == "0")
    }
}
