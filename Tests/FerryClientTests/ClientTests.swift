import FerryTestSupport
import Foundation
import Synchronization
import Testing

@testable import FerryClient

/// A client in this process on `device` of `gateway` (reached at `server` when given: a
/// proxy in front of it), syncing in the background with short backoffs. Its log lines
/// go to `log` when given.
func client(
    _ gateway: DemoGateway, _ device: String, automatic: Bool = true, stream: Bool = true, server: String? = nil,
    log: (@Sendable (String) -> Void)? = nil
) async throws -> FerryClient {
    var configuration = FerryClient.Configuration()
    configuration.syncsAutomatically = automatic
    configuration.holdsCueStream = stream
    configuration.retryBase = 0.05
    configuration.retryCap = 0.5
    configuration.requestTimeout = 10
    configuration.log = log ?? { _ in }
    return try await FerryClient(
        server: URL(string: server ?? gateway.url)!, stateDirectory: URL(fileURLWithPath: device),
        configuration: configuration)
}

/// FerryClient's API in an app's process, against a real gateway.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct ClientTests {
    /// The drain is level-triggered: a push that failed (gateway down) is retried by its
    /// backoff timer alone, with no new write, sync() call or reconnect to start it (no
    /// cue stream either, whose reopening would be a trigger).
    @Test func aFailedDrainIsRetriedWithoutAnotherTrigger() async throws {
        try await DemoGateway.with(environment: ["FERRY_LOG_LEVEL": "info"]) { gateway in
            // The client's log, so that a failure says what the drain did.
            let lines = Mutex<[String]>([])
            let ferry = try await client(gateway, gateway.device("phone"), stream: false) { line in
                lines.withLock { $0.append(line) }
            }
            let user = try #require(ferry.user?.id)
            await gateway.stop()
            try ferry.enqueue(.upsert, into: "tasks", ["id": "t-1", "title": "offline"])
            try await eventually("the push failing", seconds: 20) { ferry.status.lastError != nil }
            try await gateway.start()
            let drained = try await eventuallyHolds(seconds: 60) { ferry.status.pendingMutations == 0 }
            let log = lines.withLock { $0.suffix(40).joined(separator: "\n") }
            #expect(
                drained,
                """
                the outbox not drained by the retry timer (last error: \(String(describing: ferry.status.lastError))); \
                the client's log:
                \(log)
                the gateway's log:
                \(gateway.serveLog.suffix(4000))
                """)
            #expect(try await serverIDs(gateway, "tasks", of: user) == ["t-1"])
            // The pass that pushed also pulls; its end clears the error.
            try await eventually("the pass's end clearing the error", seconds: 30) { ferry.status.lastError == nil }
            await ferry.close()
        }
    }

    /// A client whose access token ends mid-stream keeps its cue stream: warned by the
    /// gateway, the stream renews itself with a token from the client's refresh, and a
    /// change another device pushes after the first token's end still arrives. The first
    /// token (minted with the test secret) has 80 s, more than the minute the client
    /// refreshes before; the gateway warns 60 s before a token's end and allows no leeway.
    @Test func aTokenEndingMidStreamIsRenewedAndChangesStillArrive() async throws {
        try await DemoGateway.with(environment: ["FERRY_STREAM_TOKEN_WARNING": "60", "FERRY_TOKEN_LEEWAY": "0"]) {
            gateway in
            let password = "correct horse"
            let email = "ana-\(UUID().uuidString.prefix(8))@example.com"
            let phoneFolder = gateway.device("phone")
            let first = try await client(gateway, phoneFolder, automatic: false)
            try await first.link(email: email, password: password)
            await first.close()
            let tablet = try await client(gateway, gateway.device("tablet"), automatic: false)
            try await tablet.signIn(email: email, password: password)

            let sessions = FileSessionStore(path: phoneFolder + "/session.json")
            guard case .present(var session) = sessions.load() else {
                Issue.record("the phone has no session")
                return
            }
            let now = Int(Date().timeIntervalSince1970)
            let shortToken = try signedAccessToken(
                secret: testSecret, userID: session.userID, sessionID: session.sessionID,
                deviceID: session.deviceID, isAnonymous: false, now: now, expiresAt: now + 80)
            session.accessToken = shortToken
            session.issuedAt = Date(timeIntervalSince1970: TimeInterval(now - 10))
            session.expiresAt = Date(timeIntervalSince1970: TimeInterval(now + 80))
            try sessions.save(session)

            // The phone's log, so that a failure says what its refreshes met.
            let lines = Mutex<[String]>([])
            let phone = try await client(gateway, phoneFolder) { line in lines.withLock { $0.append(line) } }
            let statuses = Shared<[Bool]>([])
            let updates = phone.statusUpdates()
            let watching = Task { for await status in updates { statuses.withLock { $0.append(status.connected) } } }
            try await eventually("the phone's stream connected", seconds: 30) { phone.status.connected }

            // Past the first token's end (measured from its exp, not from the test's start).
            try await Task.sleep(for: .seconds(max(0, session.expiresAt.timeIntervalSinceNow) + 3))
            // What the client holds now, read without asking for a token (accessToken()
            // would refresh one near its end itself), and what its store kept.
            let held = await phone.account.session?.accessToken
            #expect(
                held != nil && held != shortToken,
                """
                the client refreshed the token on its own; its log:
                \(lines.withLock { $0.suffix(30).joined(separator: "\n") })
                the gateway's log:
                \(gateway.serveLog.suffix(3000))
                """)
            guard case .present(let stored) = sessions.load() else {
                Issue.record("the phone's session is gone")
                return
            }
            #expect(stored.accessToken == held, "the refreshed token was stored")
            #expect(stored.expiresAt > Date(), "the stored token is current")
            try tablet.enqueue(.upsert, into: "tasks", ["id": "after-the-first-token", "title": "late"])
            try await tablet.sync()
            try await eventually("the change after the first token's end on the phone", seconds: 30) {
                try !phone.rows(in: "tasks", where: "id = ?1", [.text("after-the-first-token")]).isEmpty
            }
            let seen = statuses.withLock { $0 }
            let connectedAt = try #require(seen.firstIndex(of: true))
            #expect(!seen[connectedAt...].contains(false), "the stream never dropped: \(seen)")
            watching.cancel()
            await phone.close()
            await tablet.close()
        }
    }

    @Test func aMergeOfManyRowsIsOneChangeForTheTable() async throws {
        try await DemoGateway.with { gateway in
            let writer = try await client(gateway, gateway.device("writer"), automatic: false)
            for index in 0..<300 { try writer.enqueue(.upsert, into: "tasks", ["id": .string("t-\(index)")]) }
            try await writer.sync()
            let email = "ana-\(UUID().uuidString.prefix(8))@example.com"
            try await writer.link(email: email, password: "correct horse")
            let reader = try await client(gateway, gateway.device("reader"), automatic: false)
            try await reader.signIn(email: email, password: "correct horse")
            #expect(try reader.rows(in: "tasks").count == 300)

            let heard = Shared<[Set<String>]>([])
            let changes = reader.changes(to: ["tasks"])
            let listening = Task {
                for await tables in changes { heard.withLock { $0.append(tables) } }
            }
            for index in 0..<300 {
                try writer.enqueue(.upsert, into: "tasks", ["id": .string("t-\(index)"), "title": "2"])
            }
            try await writer.sync()
            try await reader.sync()
            // A positive control after the merge: observers hear changes in order, so once the
            // control's change is heard, any other change the merge made has been heard too.
            try reader.enqueue(.upsert, into: "tasks", ["id": "control"])
            try await eventually("the control change heard", seconds: 5) { heard.withLock { $0 }.count >= 2 }
            #expect(heard.withLock { $0 } == [["tasks"], ["tasks"]], "the merge was one change, then the control")
            #expect(try reader.rows(in: "tasks", where: "title = ?1", [.text("2")]).count == 300)
            #expect(try reader.rows(in: "tasks").count == 301)
            listening.cancel()
            await writer.close()
            await reader.close()
        }
    }

    @Test func aRejectedMutationIsAnEventAndTheRowIsPutBack() async throws {
        try await DemoGateway.with { gateway in
            let ferry = try await client(gateway, gateway.device("phone"), automatic: false)
            let events = ferry.events()
            try ferry.enqueue(.insert, into: "tasks", ["id": "root", "title": "the sentinel is no task's id"])
            #expect(try ferry.rows(in: "tasks").count == 1)
            try await ferry.sync()
            var iterator = events.makeAsyncIterator()
            var rejected: RejectedMutation?
            while rejected == nil, let event = await iterator.next() {
                if case .mutationRejected(let mutation) = event { rejected = mutation }
            }
            #expect(rejected?.table == "tasks")
            #expect(rejected?.code == "constraint_violation")
            #expect(try ferry.rows(in: "tasks").isEmpty)
            #expect(ferry.status.pendingMutations == 0)
            await ferry.close()
        }
    }

    /// A row created on the device shows the server's constant defaults (from
    /// `GET /v1/schema`) for the columns the write left out, and the server's row, once
    /// pulled, is the same; only the columns given were pushed.
    @Test func aNewLocalRowShowsTheServersDefaultsBeforeItIsPushed() async throws {
        try await DemoGateway.with { gateway in
            let ferry = try await client(gateway, gateway.device("phone"), automatic: false)
            let local = try ferry.enqueue(.upsert, into: "tasks", ["id": "t-1"])
            #expect(local["title"] == "")
            #expect(local["parent_id"] == "root")
            #expect(local["position"] == .double(0))
            #expect(local["metadata"] == [:])
            // updated_at is the server's (a trigger's), not a constant: unknown until pulled.
            #expect(local["updated_at"] == .null)
            try await ferry.sync()
            let pulled = try #require(try ferry.rows(in: "tasks").first)
            for column in ["id", "title", "parent_id", "position", "metadata"] {
                #expect(pulled[column] == local[column])
            }
            #expect(pulled["updated_at"] != .null)
            await ferry.close()
        }
    }

    struct Task_: Codable, Sendable, Equatable {
        var id: String
        var title: String
        var position: Double?
    }

    @Test func typedRowsGoInAndComeBack() async throws {
        try await DemoGateway.with { gateway in
            let ferry = try await client(gateway, gateway.device("phone"), automatic: false)
            try ferry.enqueue(.upsert, into: "tasks", Task_(id: "t-1", title: "milk", position: 1.5))
            try await ferry.sync()
            #expect(try ferry.rows(in: "tasks", as: Task_.self) == [Task_(id: "t-1", title: "milk", position: 1.5)])
            #expect(ferry.status.lastSyncedAt != nil)
            #expect(ferry.status.connected)
            let count = try ferry.query("select count(*) as n from tasks")
            #expect(count == [["n": .integer(1)]])
            await ferry.close()
        }
    }
}
