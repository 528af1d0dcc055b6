import FerryTestSupport
import Foundation
import Testing

/// Accounts and locks through ferry-demo processes against a real gateway.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct DemoAccountTests {
    @Test func aFirstLaunchSignsUpAnonymouslyAndLaterLaunchesKeepTheAccount() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            let first = try await gateway.status(device)
            #expect(first["anonymous"] as? Bool == true)
            #expect(first["email"] is NSNull)
            #expect(try await gateway.status(device)["user_id"] as? String == first["user_id"] as? String)
            let attributes = try FileManager.default.attributesOfItem(atPath: device + "/session.json")
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        }
    }

    /// A session file that cannot be read is never taken for a fresh install: the
    /// command fails, and the account (marker, data) is still there afterwards.
    @Test func anUnreadableSessionIsNotDiscarded() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            let user = try #require(try await gateway.status(device)["user_id"] as? String)
            let saved = try Data(contentsOf: URL(fileURLWithPath: device + "/session.json"))
            try Data("not a session".utf8).write(to: URL(fileURLWithPath: device + "/session.json"))
            let garbled = try await gateway.demo(device, "status")
            #expect(garbled.status == 1)
            #expect(garbled.errors.contains("could not be read"), "\(garbled.errors)")
            try FileManager.default.removeItem(atPath: device + "/session.json")
            #expect(try await gateway.demo(device, "status").status == 1)
            try saved.write(to: URL(fileURLWithPath: device + "/session.json"))
            #expect(try await gateway.status(device)["user_id"] as? String == user)
        }
    }

    @Test func signOutThenSignInOfAnotherUserShowsNoneOfTheFirstUsersRows() async throws {
        try await DemoGateway.with { gateway in
            let shared = gateway.device("shared")
            let other = gateway.device("other")
            try await gateway.demoJSON(shared, "enqueue", "tasks", "upsert", #"{"id": "ana-1", "title": "ana's"}"#)
            try await gateway.demoJSON(shared, "link", "ana@example.com", "correct horse")
            try await gateway.demoJSON(shared, "sync")
            try await gateway.demoJSON(other, "enqueue", "tasks", "upsert", #"{"id": "bob-1", "title": "bob's"}"#)
            try await gateway.demoJSON(other, "link", "bob@example.com", "battery staple")
            let ana = try #require(try await gateway.status(shared)["user_id"] as? String)

            try await gateway.demoJSON(shared, "signout")
            let fresh = try await gateway.status(shared)
            #expect(fresh["anonymous"] as? Bool == true)
            #expect(fresh["user_id"] as? String != ana)
            #expect(try await gateway.show(shared, "tasks") == "[]")
            #expect(!FileManager.default.fileExists(atPath: shared + "/\(ana).sqlite"))

            try await gateway.demoJSON(shared, "signin", "bob@example.com", "battery staple")
            #expect(try await gateway.status(shared)["email"] as? String == "bob@example.com")
            #expect(try shownIDs(try await gateway.show(shared, "tasks")) == ["bob-1"])
            // The server revoked ana's session at sign-out.
            let sessions = try await gateway.rows(
                "select (revoked_at is not null)::text from ferry.sessions where user_id = $1", [ana])
            #expect(sessions.allSatisfy { $0[0] == "true" } && !sessions.isEmpty)
        }
    }

    /// The device's anonymous rows, still in its outbox, are pushed before the sign-in
    /// asks; the question carries both counts.
    @Test(arguments: ["keep_cloud", "keep_device"])
    func theFirstSignInWithAPendingOutboxAsksAndHonoursTheChoice(choice: String) async throws {
        try await DemoGateway.with { gateway in
            let cloud = gateway.device("cloud")
            let device = gateway.device("new")
            try await gateway.demoJSON(cloud, "enqueue", "tasks", "upsert", #"{"id": "cloud-1"}"#)
            try await gateway.demoJSON(cloud, "link", "ana@example.com", "correct horse")
            try await gateway.demoJSON(cloud, "sync")
            let anonymous = try #require(try await gateway.status(device)["user_id"] as? String)
            try await gateway.demoJSON(device, "enqueue", "tasks", "upsert", #"{"id": "device-1"}"#)
            try await gateway.demoJSON(device, "enqueue", "tasks", "upsert", #"{"id": "device-2"}"#)

            let asked = try await gateway.demo(device, "signin", "ana@example.com", "correct horse")
            #expect(asked.status == 3, "\(asked.errors)")
            let counts = try JSONSerialization.jsonObject(with: Data(asked.output.utf8)) as? [String: Int]
            #expect(counts == ["device_rows": 2, "cloud_rows": 1])
            #expect(try await serverIDs(gateway, "tasks", of: anonymous) == ["device-1", "device-2"])

            try await gateway.demoJSON(device, "signin", "ana@example.com", "correct horse", "--resolve", choice)
            let status = try await gateway.status(device)
            #expect(status["email"] as? String == "ana@example.com")
            #expect(status["pending_mutations"] as? Int == 0)
            let expected = choice == "keep_cloud" ? ["cloud-1"] : ["device-1", "device-2"]
            #expect(try shownIDs(try await gateway.show(device, "tasks")) == expected)
            try await gateway.demoJSON(cloud, "sync")
            #expect(try shownIDs(try await gateway.show(cloud, "tasks")) == expected)
        }
    }

    /// A copy of a signed-out device's folder still holds the revoked session: its next
    /// sync is answered `session_revoked`, which signs it out (at once, nothing waits on
    /// the sync that learned it) and keeps its data file.
    @Test func aSessionTheServerRevokedSignsTheDeviceOutAndKeepsItsData() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            let copy = gateway.device("copy")
            let user = try #require(try await gateway.status(device)["user_id"] as? String)
            try await gateway.demoJSON(device, "enqueue", "tasks", "upsert", #"{"id": "t-1"}"#)
            try FileManager.default.copyItem(atPath: device, toPath: copy)
            try await gateway.demoJSON(device, "signout")
            let sync = try await gateway.demo(copy, "sync")
            #expect(sync.status == 1, "\(sync.errors)")
            #expect(sync.errors.contains("session_revoked"), "\(sync.errors)")
            #expect(FileManager.default.fileExists(atPath: copy + "/\(user).sqlite"))
            #expect(try await gateway.status(copy)["user_id"] as? String != user)
        }
    }

    @Test func badCredentialsExitOneAndChangeNothing() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            let user = try await gateway.status(device)["user_id"] as? String
            let run = try await gateway.demo(device, "signin", "nobody@example.com", "wrong horse")
            #expect(run.status == 1)
            #expect(run.errors.contains("invalid_credentials"), "\(run.errors)")
            #expect(try await gateway.status(device)["user_id"] as? String == user)
        }
    }

    @Test func deleteAccountRemovesTheUserAndLeavesAFreshInstall() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            try await gateway.demoJSON(device, "enqueue", "tasks", "upsert", #"{"id": "t-1"}"#)
            try await gateway.demoJSON(device, "sync")
            let user = try #require(try await gateway.status(device)["user_id"] as? String)
            try await gateway.demoJSON(device, "delete-account")
            #expect(try await gateway.rows("select id from ferry.users where id = $1", [user]).isEmpty)
            #expect(try await gateway.rows("select id from public.tasks where user_id = $1", [user]).isEmpty)
            #expect(try await gateway.status(device)["user_id"] as? String != user)
            #expect(try await gateway.show(device, "tasks") == "[]")
        }
    }

    /// The server answers `401 token_expired` to a token the device still thinks good
    /// (a clock that runs slow): the device refreshes once and sends the push again.
    @Test func anExpiredTokenIsRefreshedOnceAndTheRequestSentAgain() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            let user = try #require(try await gateway.status(device)["user_id"] as? String)
            let path = device + "/session.json"
            var session = try #require(
                try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
            let old = try #require(session["accessToken"] as? String)
            let oldRefreshToken = try #require(session["refreshToken"] as? String)
            session["accessToken"] = try expiredCopy(of: old)
            try JSONSerialization.data(withJSONObject: session).write(to: URL(fileURLWithPath: path))

            try await gateway.demoJSON(device, "enqueue", "tasks", "upsert", #"{"id": "t-1"}"#)
            let sync = try await gateway.demo(device, "sync")
            #expect(sync.status == 0, "\(sync.errors)")
            #expect(try await serverIDs(gateway, "tasks", of: user) == ["t-1"])
            let refreshed = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path)))
            // The refresh token rotates on every refresh (an access token issued in the
            // same second as the old one can be the same text).
            #expect((refreshed as? [String: Any])?["refreshToken"] as? String != oldRefreshToken)
        }
    }

    /// With tokens that live a minute every command refreshes first. Eight processes on
    /// one state folder refresh at once: one at a time (flock), each later one using the
    /// tokens the previous stored, so no refresh token is sent twice (which would revoke
    /// the session) and every one of them succeeds.
    @Test func processesSharingAFolderRefreshOneAtATime() async throws {
        try await DemoGateway.with(environment: ["FERRY_ACCESS_TOKEN_TTL": "60"]) { gateway in
            let device = gateway.device("phone")
            try await gateway.demoJSON(device, "enqueue", "tasks", "upsert", #"{"id": "t-1"}"#)
            let runs = try (0..<8).map { _ in try gateway.startDemo(device, ["sync"]) }
            // Each waits on the ones before it: patient, for a machine busy with the whole suite.
            for (child, _, errors) in runs {
                let (ending, _) = try await offload { child.wait(seconds: 180) }
                #expect(ending == .exited(0), "\((try? String(contentsOfFile: errors, encoding: .utf8)) ?? "")")
            }
            let user = try #require(try await gateway.status(device)["user_id"] as? String)
            let reused = try await gateway.rows(
                "select count(*)::text from ferry.sessions where user_id = $1 and revoked_at is not null", [user])
            #expect(reused == [["0"]])
        }
    }

    /// Takeover: the second device is told who holds the lock and how fresh it is, takes
    /// it with --force; the first then learns it lost it, and its push to the row is rejected.
    @Test func theTakeoverFlowWithTwoDevices() async throws {
        try await DemoGateway.with { gateway in
            let phone = gateway.device("phone")
            let tablet = gateway.device("tablet")
            try await gateway.demoJSON(phone, "link", "ana@example.com", "correct horse")
            try await gateway.demoJSON(tablet, "signin", "ana@example.com", "correct horse")
            let phoneID = try #require(try await gateway.status(phone)["device_id"] as? String)
            let tabletID = try #require(try await gateway.status(tablet)["device_id"] as? String)

            let claimed = try #require(
                try await gateway.demoJSON(phone, "claim", "active_game", "current") as? [String: Any])
            #expect(claimed["holder"] as? String == phoneID)
            try await gateway.demoJSON(phone, "heartbeat", "active_game", "current")
            let held = try await gateway.demo(tablet, "claim", "active_game", "current")
            #expect(held.status == 1)
            #expect(held.errors.contains("lock_held holder=\(phoneID) heartbeat_age_ms="), "\(held.errors)")
            let taken = try #require(
                try await gateway.demoJSON(tablet, "claim", "active_game", "current", "--force") as? [String: Any])
            #expect(taken["holder"] as? String == tabletID)

            let lost = try await gateway.demo(phone, "heartbeat", "active_game", "current")
            #expect(lost.status == 1)
            #expect(lost.errors.contains("lock_lost holder=\(tabletID)"), "\(lost.errors)")
            try await gateway.demoJSON(phone, "enqueue", "active_game", "upsert", #"{"slot": "current", "hints": 3}"#)
            let push = try await gateway.demo(phone, "sync")
            #expect(push.status == 1)
            #expect(push.errors.contains("lock_not_held"), "\(push.errors)")

            try await gateway.demoJSON(tablet, "release", "active_game", "current")
            #expect(try await gateway.demo(tablet, "heartbeat", "active_game", "current").status == 1)
        }
    }

    @Test func badArgumentsExitTwo() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            for arguments in [
                ["frobnicate"], ["enqueue", "tasks", "merge", "{}"], ["enqueue", "nope", "upsert", "{}"],
                ["enqueue", "tasks", "upsert", "not json"], ["show"], ["signin", "a", "b", "--resolve", "both"],
            ] {
                let run = try await gateway.demo(device, arguments)
                #expect(run.status == 2, "\(arguments): \(run.errors)")
            }
        }
    }
}

/// `token` with `iat` and `exp` in the past, signed again with the test secret: a token
/// the server answers `401 token_expired`.
func expiredCopy(of token: String) throws -> String {
    let parts = token.split(separator: ".").map(String.init)
    try #require(parts.count == 3)
    var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
    let payloadData = try #require(Data(base64Encoded: base64))
    var claims = try #require(try JSONSerialization.jsonObject(with: payloadData) as? [String: Any])
    let now = Int(Date().timeIntervalSince1970)
    claims["iat"] = now - 7200
    claims["exp"] = now - 3600
    func encode(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
    let payload = encode(try JSONSerialization.data(withJSONObject: claims))
    let signature = encode(Data(hmacSHA256(key: testSecret, parts[0] + "." + payload)))
    return parts[0] + "." + payload + "." + signature
}
