import FerryHTTP
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// `GET` and `POST /v1/watermelon/sync` over HTTP against the to-do example, as
/// `ferry_gateway`: the query read strictly, the answers as WatermelonDB takes them, the
/// errors with PROTOCOL.md's codes, the limits naming their settings, the route counted
/// like push and pull, and cues with the pushing device as origin.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct WatermelonRoutesTests {
    // MARK: - The query, without sockets

    @Test func lastPulledAtIsAPositiveSafeIntegerOrAFirstSync() throws {
        for text in [nil, "", "null", "0"] {
            #expect(try WatermelonTimestamp.parse(text) == nil, "\(String(describing: text))")
        }
        #expect(try WatermelonTimestamp.parse("1") == 1)
        #expect(try WatermelonTimestamp.parse("9007199254740991") == 9_007_199_254_740_991)
        for text in [
            "abc", "-1", "+1", "1.5", "1e3", " 1", "1 ", "9007199254740992", "99999999999999999999", "undefined",
        ] {
            #expect(throws: WatermelonTimestamp.InvalidTimestamp.self, "\(text)") {
                try WatermelonTimestamp.parse(text)
            }
        }
    }

    @Test func thePullQueryIsReadStrictly() throws {
        func parse(_ query: String) -> Result<WatermelonPullQuery, APIError> {
            WatermelonPullQuery.parse(HTTPRequest(method: .get, path: WatermelonRoutes.path, query: query))
        }
        let migration = #"{"from":1,"tables":["tags"],"columns":[]}"#
        let encoded = migration.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        #expect(
            try parse("last_pulled_at=12&schema_version=3&migration=\(encoded)").get()
                == WatermelonPullQuery(lastPulledAt: 12, schemaVersion: 3, migration: migration))
        #expect(
            try parse("last_pulled_at=null&schema_version=1&migration=null").get()
                == WatermelonPullQuery(lastPulledAt: nil, schemaVersion: 1, migration: nil))
        for (query, code) in [
            ("last_pulled_at=1.5", "invalid_cursor"), ("last_pulled_at=%ZZ", "invalid_cursor"),
            ("schema_version=0", "invalid_request"), ("schema_version=x", "invalid_request"),
            ("schema_version=%2B1", "invalid_request"), ("migration=%7Bnope", "invalid_request"),
            ("migration=%ZZ", "invalid_request"),
        ] {
            switch parse(query) {
            case .success(let parsed): Issue.record("\(query) was read as \(parsed)")
            case .failure(let error): #expect(error.code == code && error.status.code == 400, "\(query): \(error)")
            }
        }
    }

    // MARK: - Over HTTP

    @Test func aFirstSyncAnswersChangesAndATimestampAndNothingElse() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            try await server.database.admin.execute(
                "insert into tasks (id, user_id, title) values ('t1', '\(phone.userID)', 'milk')")
            var timestamps: [Int] = []
            for query in [
                "", "?last_pulled_at=", "?last_pulled_at=null&schema_version=1&migration=null", "?last_pulled_at=0",
            ] {
                let pull = try await server.call("GET", WatermelonRoutes.path + query, token: phone.accessToken)
                #expect(pull.status == 200, "\(query): \(pull)")
                #expect(pull.header("Content-Type") == "application/json")
                #expect(Set(pull.object.map { Array($0.keys) } ?? []) == ["changes", "timestamp"], "\(pull)")
                let tasks = try #require(pull.value("changes", "tasks") as? [String: Any], "\(pull)")
                #expect(Set(tasks.keys) == ["created", "updated", "deleted"])
                #expect((tasks["updated"] as? [[String: Any]])?.map { $0["id"] as? String } == ["t1"])
                timestamps.append(try #require(pull.value("timestamp") as? Int))
            }
            #expect(timestamps == timestamps.sorted() && Set(timestamps).count == 4, "\(timestamps)")
            let next = try await server.call(
                "GET", "\(WatermelonRoutes.path)?last_pulled_at=\(timestamps[3])&schema_version=1",
                token: phone.accessToken)
            #expect((next.value("changes", "tasks", "updated") as? [Any])?.isEmpty == true, "\(next)")
        }
    }

    @Test func badPullsAre400AndAnUnknownTimestamp409CursorExpired() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            for (query, code) in [
                ("last_pulled_at=abc", "invalid_cursor"), ("last_pulled_at=-1", "invalid_cursor"),
                ("last_pulled_at=1e3", "invalid_cursor"), ("last_pulled_at=9007199254740992", "invalid_cursor"),
                ("schema_version=abc", "invalid_request"), ("migration=%5B1", "invalid_request"),
                ("migration=%7B%22tables%22%3A%5B%5D%7D", "invalid_request"),
            ] {
                let pull = try await server.call("GET", "\(WatermelonRoutes.path)?\(query)", token: phone.accessToken)
                #expect(pull.status == 400 && pull.code == code && pull.retryable == false, "\(query): \(pull)")
            }
            let shape = try await server.call(
                "GET", "\(WatermelonRoutes.path)?last_pulled_at=null&migration=%7B%22tables%22%3A%5B%5D%7D",
                token: phone.accessToken)
            #expect(shape.string("error", "message")?.hasPrefix("migration must be null or {") == true, "\(shape)")
            let unknown = try await server.call(
                "GET", "\(WatermelonRoutes.path)?last_pulled_at=12345", token: phone.accessToken)
            #expect(unknown.status == 409 && unknown.code == "cursor_expired", "\(unknown)")
            #expect(unknown.string("error", "message")?.contains("reset the local database and sync again") == true)
            let anonymous = try await server.call("GET", WatermelonRoutes.path)
            #expect(anonymous.status == 401 && anonymous.code == "unauthorized")
        }
    }

    @Test func aPushAppliesAndAConflictIs409NamingTheRecords() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            let pull = try await server.watermelonPull(phone)
            let push = try await server.watermelonPush(
                phone, pull, ["tasks": changes(created: [["id": "t1", "title": "milk", "_status": "created"]])])
            #expect(push.status == 200 && push.raw.text == "{}", "\(push)")
            // Someone else changes it after this pull: the push is refused whole.
            let stale = try await server.watermelonPull(phone, since: pull)
            try await server.database.admin.execute("update tasks set title = 'elsewhere'")
            let conflict = try await server.watermelonPush(
                phone, stale,
                ["tasks": changes(created: [["id": "t2"]], updated: [["id": "t1", "title": "here"]])])
            #expect(conflict.status == 409 && conflict.code == "conflict" && conflict.retryable == false, "\(conflict)")
            #expect(conflict.value("error", "conflicts") as? [String: [String]] == ["tasks": ["t1"]], "\(conflict)")
            #expect(conflict.string("error", "message")?.contains("pull, then push again") == true)
            #expect(try await server.database.rows("select id, title from tasks") == [["t1", "elsewhere"]])
            // The client does what WatermelonDB's docs say: pull, then push again.
            let fresh = try await server.watermelonPull(phone, since: stale)
            let retried = try await server.watermelonPush(
                phone, fresh, ["tasks": changes(created: [["id": "t2"]], updated: [["id": "t1", "title": "here"]])])
            #expect(retried.status == 200, "\(retried)")
            let rejected = try await server.watermelonPush(
                phone, try await server.watermelonPull(phone, since: fresh),
                ["tasks": changes(created: [["id": "root", "title": "the sentinel"]])])
            #expect(
                rejected.value("experimentalRejectedIds") as? [String: [String]] == ["tasks": ["root"]], "\(rejected)")
        }
    }

    @Test func badPushesAre400AndNothingIsApplied() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            let pull = try await server.watermelonPull(phone)
            let path = WatermelonRoutes.path
            let good = Array(#"{"tasks": {"created": [{"id": "t1"}], "updated": [], "deleted": []}}"#.utf8)
            for (query, body, code, fragment) in [
                ("", good, "invalid_cursor", "a push needs last_pulled_at"),
                ("?last_pulled_at=null", good, "invalid_cursor", "a push needs last_pulled_at"),
                ("?last_pulled_at=x", good, "invalid_cursor", "last_pulled_at must be"),
                ("?last_pulled_at=\(pull)", Array(#"{"tasks": "#.utf8), "invalid_json", "not valid JSON"),
                ("?last_pulled_at=\(pull)", [], "invalid_json", "not valid JSON"),
                ("?last_pulled_at=\(pull)", Array("[]".utf8), "invalid_request", "changes object"),
                (
                    "?last_pulled_at=\(pull)",
                    Array(
                        #"{"tasks": {"created": [{"id": "t1", "position": "2"}], "updated": [], "deleted": []}}"#.utf8),
                    "invalid_request", "tasks.position: expected a number"
                ),
                (
                    "?last_pulled_at=\(pull)",
                    Array(#"{"subscriptions": {"created": [{"id": "x"}], "updated": [], "deleted": []}}"#.utf8),
                    "invalid_request", #"table "subscriptions" is not served"#
                ),
            ] {
                let response = try await server.call("POST", path + query, token: phone.accessToken, body: body)
                #expect(response.status == 400 && response.code == code, "\(query) \(body.count): \(response)")
                #expect(response.string("error", "message")?.contains(fragment) == true, "\(response)")
            }
            let expired = try await server.call(
                "POST", "\(path)?last_pulled_at=\(pull + 1000)", token: phone.accessToken, body: good)
            #expect(expired.status == 409 && expired.code == "cursor_expired", "\(expired)")
            #expect(try await server.database.value("select count(*) from tasks") == "0")
        }
    }

    @Test func overItsLimitsAPushIs413NamingTheSettingAndItsBodyMayPassTheGeneralLimit() async throws {
        try await withAccountsGateway(
            arguments: [
                "--max-body-bytes", "2048", "--watermelon-max-body-bytes", "8192", "--watermelon-max-push-records",
                "20",
            ], examples: ["tasks"]
        ) { server in
            let phone = try await server.signUpAnonymous()
            let pull = try await server.watermelonPull(phone)
            func records(_ count: Int, padding: Int) -> [[String: Any]] {
                (0..<count).map { ["id": "t\($0)", "title": String(repeating: "x", count: padding)] }
            }
            // 5 KiB: over the general limit, under this route's.
            let big = try await server.watermelonPush(
                phone, pull, ["tasks": changes(created: records(5, padding: 1000))])
            #expect(big.status == 200, "\(big)")
            let tooBig = try await server.watermelonPush(
                phone, pull, ["tasks": changes(created: records(9, padding: 1000))])
            #expect(tooBig.status == 413 && tooBig.code == "payload_too_large", "\(tooBig)")
            #expect(tooBig.string("error", "message")?.contains("FERRY_WATERMELON_MAX_BODY_BYTES") == true, "\(tooBig)")
            let tooMany = try await server.watermelonPush(
                phone, pull, ["tasks": changes(created: records(21, padding: 1))])
            #expect(tooMany.status == 413 && tooMany.code == "payload_too_large", "\(tooMany)")
            #expect(
                tooMany.string("error", "message")
                    == "a WatermelonDB push carries at most 20 records (FERRY_WATERMELON_MAX_PUSH_RECORDS)",
                "\(tooMany)")
            // The general limit holds everywhere else.
            let push = try await server.call(
                "POST", "/v1/push", token: phone.accessToken,
                body: Array(#"{"mutations": [], "pad": "\#(String(repeating: "x", count: 3000))"}"#.utf8))
            #expect(push.status == 413, "\(push)")
            #expect(try await server.database.value("select count(*) from tasks") == "5")
        }
    }

    @Test func theRouteIsCountedInFlightAndItsPushesSpendThePushBudget() async throws {
        try await withAccountsGateway(
            arguments: RequestsInFlightTests.holding + ["--requests-per-device", "1"], examples: ["tasks"]
        ) { server in
            let phone = try await server.signUpAnonymous()
            let pull = try await server.watermelonPull(phone)
            let lock = try await DeviceRowLock.take(phone, server)
            let held = try await server.holdPushes(phone, count: 1)
            let refusedPull = try await server.call("GET", WatermelonRoutes.path, token: phone.accessToken)
            #expect(refusedPull.status == 429 && refusedPull.code == "rate_limited", "\(refusedPull)")
            let refusedPush = try await server.watermelonPush(phone, pull, ["tasks": changes(created: [["id": "t1"]])])
            #expect(refusedPush.status == 429, "\(refusedPush)")
            try await lock.release()
            for request in held { #expect(try await request.answer().status == 200) }
            #expect(server.gateway.requests.perDevice.keysHolding == 0)
        }
        try await withAccountsGateway(arguments: ["--push-bytes-per-second", "1024"], examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            let pull = try await server.watermelonPull(phone)
            let body = Array(
                #"{"tasks": {"created": [{"id": "t1", "title": "\#(String(repeating: "x", count: 2000))"}], "updated": [], "deleted": []}}"#
                    .utf8)
            let head =
                "POST \(WatermelonRoutes.path)?last_pulled_at=\(pull) HTTP/1.1\r\nHost: test\r\n"
                + "Authorization: Bearer \(phone.accessToken)\r\nContent-Type: application/json\r\n"
                + "Content-Length: \(body.count)\r\n\r\n"
            let (first, second) = try await offload {
                let client = try HTTPTestClient(port: server.port, timeout: 30)
                defer { client.close() }
                try client.send(Array(head.utf8) + body + Array(head.utf8) + body)
                return (try client.readResponse(), try client.readResponse())
            }
            #expect(first.status == 200, "\(first.text)")
            #expect(second.status == 429 && second.text.contains("pushed more than 1024 bytes"), "\(second.text)")
        }
    }

    @Test func theSchemaSaysWhichTablesAreServed() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            let schema = try await server.call("GET", "/v1/schema", token: phone.accessToken)
            let tables = try #require(schema.value("tables") as? [[String: Any]], "\(schema)")
            let served = tables.filter { ($0["watermelon"] as? [String: Any])?["served"] as? Bool == true }
            #expect(served.map { $0["name"] as? String } == ["tasks"], "\(schema)")
            let subscriptions =
                tables.first { $0["name"] as? String == "subscriptions" }?["watermelon"] as? [String: Any]
            #expect(subscriptions?["served"] as? Bool == false && subscriptions?["reason"] is String, "\(schema)")
        }
    }

    @Test func aPushCuesTheUsersOtherDevicesWithItsOrigin() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let (phone, laptop) = try await server.twoDevices(email: "cues@example.com")
            let stream = try await server.openStream(laptop, .serverSentEvents)
            _ = try await stream.nextMessageAsync(ofType: "hello")
            let pull = try await server.watermelonPull(phone)
            let push = try await server.watermelonPush(phone, pull, ["tasks": changes(created: [["id": "t1"]])])
            #expect(push.status == 200, "\(push)")
            let cue = try await stream.nextMessageAsync(ofType: "cue")
            #expect(cue.strings("tables") == ["tasks"] && cue.string("origin") == phone.deviceID, "\(cue)")
            stream.close()
        }
    }

    /// WatermelonDB's id rules and the sign-in that keeps the device's data: the
    /// device's next pull goes on from its timestamp.
    @Test func keepDeviceSignInKeepsTheDevicesTimestamp() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            _ = try await server.emailAccount("keep@example.com")
            let device = try await server.signUpAnonymous()
            let pull = try await server.watermelonPull(device)
            _ = try await server.watermelonPush(device, pull, ["tasks": changes(created: [["id": "t1"]])])
            let signedIn = try await server.signIn(
                email: "keep@example.com", password: "correct horse battery", device: device.deviceID,
                bearer: device.accessToken, resolve: "keep_device")
            #expect(signedIn.status == 200, "\(signedIn)")
            let session = try server.session(from: signedIn, device: device.deviceID)
            let next = try await server.call(
                "GET", "\(WatermelonRoutes.path)?last_pulled_at=\(pull)", token: session.accessToken)
            #expect(next.status == 200, "\(next)")
            #expect(
                (next.value("changes", "tasks", "updated") as? [[String: Any]])?.map { $0["id"] as? String } == ["t1"])
        }
    }
}

extension AccountsGateway {
    /// `GET /v1/watermelon/sync` as `session`, required to answer 200; its timestamp.
    func watermelonPull(_ session: TestSession, since: Int? = nil) async throws -> Int {
        let query = since.map { "?last_pulled_at=\($0)" } ?? ""
        let response = try await call("GET", WatermelonRoutes.path + query, token: session.accessToken)
        try #require(response.status == 200, "pull: \(response)")
        return try #require(response.value("timestamp") as? Int, "\(response)")
    }

    /// `POST /v1/watermelon/sync` of `changes` as `session`, after the pull that answered `lastPulledAt`.
    func watermelonPush(_ session: TestSession, _ lastPulledAt: Int, _ changes: [String: Any]) async throws
        -> APIResponse
    {
        try await call(
            "POST", "\(WatermelonRoutes.path)?last_pulled_at=\(lastPulledAt)", token: session.accessToken,
            json: changes)
    }
}
