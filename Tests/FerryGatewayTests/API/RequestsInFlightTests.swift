import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// PROTOCOL.md notes, "Requests in flight": one device, and one user over all its
/// devices, may have only so many database requests in flight on a gateway; the next is
/// `429 rate_limited` with `Retry-After` at once, while other users are served. Pushes
/// are held in flight by a row lock the test takes on their device's `ferry.devices` row
/// (every push locks it first), so nothing depends on timing.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct RequestsInFlightTests {
    /// The held pushes wait as long as a test takes, which on a loaded machine can pass
    /// the default statement timeout (10 s, then 503).
    static let holding = ["--statement-timeout-ms", "300000"]

    @Test func aDeviceOverItsLimitIs429WithRetryAfterWhileAnotherUserIsServed() async throws {
        try await withAccountsGateway(
            arguments: Self.holding + ["--requests-per-device", "2", "--requests-per-user", "10"]
        ) {
            server in
            let alice = try await server.signUpAnonymous()
            let bob = try await server.signUpAnonymous()
            let lock = try await DeviceRowLock.take(alice, server)
            let held = try await server.holdPushes(alice, count: 2)

            let sent = ContinuousClock.now
            let third = try await server.call("POST", "/v1/push", token: alice.accessToken, json: ["mutations": []])
            #expect(ContinuousClock.now - sent > .milliseconds(900), "the refusal is held for its Retry-After")
            #expect(third.status == 429, "\(third)")
            #expect(third.code == "rate_limited")
            #expect(third.retryable == true)
            #expect(third.header("Retry-After") == "1")
            #expect(
                third.string("error", "message")?.hasPrefix("this device already has 2 requests in flight") == true,
                "\(third)")
            let alicePull = try await server.call("GET", "/v1/pull", token: alice.accessToken)
            #expect(alicePull.status == 429, "every route that reaches the database counts: \(alicePull)")
            let bobPull = try await server.call("GET", "/v1/pull", token: bob.accessToken)
            #expect(bobPull.status == 200, "another user is served meanwhile: \(bobPull)")

            try await lock.release()
            for request in held { #expect(try await request.answer().status == 200) }
            #expect(server.gateway.requests.perDevice.keysHolding == 0)
            #expect(server.gateway.requests.perUser.keysHolding == 0)
            let again = try await server.call("POST", "/v1/push", token: alice.accessToken, json: ["mutations": []])
            #expect(again.status == 200, "\(again)")
        }
    }

    @Test func theUserLimitCountsEveryDeviceOfTheUser() async throws {
        try await withAccountsGateway(
            arguments: Self.holding + ["--requests-per-device", "2", "--requests-per-user", "3"]
        ) {
            server in
            let (phone, tablet) = try await server.twoDevices(email: "busy@example.com")
            let bob = try await server.signUpAnonymous()
            let phoneLock = try await DeviceRowLock.take(phone, server)
            let tabletLock = try await DeviceRowLock.take(tablet, server)
            var held = try await server.holdPushes(phone, count: 2)
            held += try await server.holdPushes(tablet, count: 1)
            #expect(server.gateway.requests.perUser.count(phone.userID) == 3)

            // The tablet has one request in flight, under its own limit: the user's is spent.
            let tablets = try await server.call("GET", "/v1/pull", token: tablet.accessToken)
            #expect(tablets.status == 429, "\(tablets)")
            #expect(tablets.header("Retry-After") == "1")
            #expect(
                tablets.string("error", "message")?.hasPrefix(
                    "this user already has 3 requests in flight from its devices") == true, "\(tablets)")
            let phones = try await server.call("GET", "/v1/pull", token: phone.accessToken)
            #expect(
                phones.string("error", "message")?.hasPrefix("this device already has 2") == true, "\(phones)")
            #expect(try await server.call("GET", "/v1/pull", token: bob.accessToken).status == 200)
            // A refusal counts nothing.
            #expect(
                server.gateway.requests.perDevice.count(.init(userID: tablet.userID, deviceID: tablet.deviceID)) == 1)

            try await phoneLock.release()
            try await tabletLock.release()
            for request in held { #expect(try await request.answer().status == 200) }
            #expect(server.gateway.requests.perUser.keysHolding == 0)
            #expect(try await server.call("GET", "/v1/pull", token: tablet.accessToken).status == 200)
        }
    }

    @Test func aDevicePushingPastItsBytesPerSecondIs429UntilTheSecondHasPassed() async throws {
        try await withAccountsGateway(arguments: ["--push-bytes-per-second", "1024"]) { server in
            let alice = try await server.signUpAnonymous()
            let phone = try await server.signUpAnonymous()
            // Unknown members of a push body are ignored: 2,000 bytes of padding, no mutation.
            let body = Array(#"{"mutations": [], "pad": "\#(String(repeating: "x", count: 2000))"}"#.utf8)
            let head =
                "POST /v1/push HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(alice.accessToken)\r\n"
                + "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n"
            // Pipelined in one write, both are admitted within the same second.
            let client = try HTTPTestClient(port: server.port, timeout: 30)
            defer { client.close() }
            try client.send(Array(head.utf8) + body + Array(head.utf8) + body)
            let first = try client.readResponse()
            let second = try client.readResponse()
            #expect(first.status == 200, "a fresh second admits one push of any size")
            #expect(second.status == 429, "\(second.status)")
            #expect(second.header("Retry-After") == "1")
            #expect(
                String(decoding: second.body, as: UTF8.self).contains(
                    "this device pushed more than 1024 bytes in the last second"))
            #expect(server.gateway.requests.perDevice.keysHolding == 0, "a refusal counts nothing in flight")
            #expect(try await server.call("GET", "/v1/pull", token: alice.accessToken).status == 200, "pulls are free")
            let others = try await server.call("POST", "/v1/push", token: phone.accessToken, json: ["mutations": []])
            #expect(others.status == 200, "another device has its own budget: \(others)")
            // The refusal was held for its second, so alice's window has passed.
            let again = try await server.call("POST", "/v1/push", token: alice.accessToken, json: ["mutations": []])
            #expect(again.status == 200, "\(again)")
        }
    }

    @Test func requestsTheDatabaseFailsAreGivenBack() async throws {
        try await withAccountsGateway(arguments: Self.holding + ["--requests-per-device", "2"]) { server in
            let alice = try await server.signUpAnonymous()
            let lock = try await DeviceRowLock.take(alice, server)
            let held = try await server.holdPushes(alice, count: 2)
            // Both pushes' backends end under them: a lost connection, answered 503.
            let pids = try await server.pushBackendsWaitingOnALock()
            #expect(pids.count == 2)
            for pid in pids {
                #expect(try await server.database.value("select pg_terminate_backend($1::int)::text", [pid]) == "true")
            }
            for request in held { #expect(try await request.answer().status == 503) }
            try await lock.release()
            // And one the database refuses: ferry.push's own check of the batch (22023).
            let invalid = try await server.call(
                "POST", "/v1/push", token: alice.accessToken, json: ["mutations": "not a list"])
            #expect(invalid.status == 400 && invalid.code == "invalid_request", "\(invalid)")
            #expect(server.gateway.requests.perDevice.keysHolding == 0)
            #expect(server.gateway.requests.perUser.keysHolding == 0)
            for _ in 0..<2 {
                #expect(try await server.call("GET", "/v1/pull", token: alice.accessToken).status == 200)
            }
        }
    }

    @Test func aRequestWhoseClientLeftCountsUntilTheDatabaseAnswersIt() async throws {
        try await withAccountsGateway(arguments: Self.holding + ["--requests-per-device", "2"]) { server in
            let alice = try await server.signUpAnonymous()
            let lock = try await DeviceRowLock.take(alice, server)
            let held = try await server.holdPushes(alice, count: 2)
            // One client ends its input (the gateway still answers into it), one resets
            // (the gateway drops that connection while its push waits in PostgreSQL).
            held[0].close()
            held[1].reset()
            #expect(try await server.metric("ferry_http_open_connections", becomes: 2) == 2, "the reset one is gone")
            // Their database connections are still busy, so the device is still at its limit.
            let meanwhile = try await server.call("GET", "/v1/pull", token: alice.accessToken)
            #expect(meanwhile.status == 429, "\(meanwhile)")

            try await lock.release()
            try await eventually("the abandoned requests were given back") {
                server.gateway.requests.perDevice.keysHolding == 0 && server.gateway.requests.perUser.keysHolding == 0
            }
            #expect(try await server.call("GET", "/v1/pull", token: alice.accessToken).status == 200)
        }
    }
}

// MARK: - Helpers

/// A row lock on a device's `ferry.devices` row, held in a transaction of its own
/// connection: every push of that device waits on it (`ferry.lock_device`).
struct DeviceRowLock {
    let connection: PostgresClient

    /// Pushes once as `session` (so its device row exists), then locks that row.
    static func take(_ session: TestSession, _ server: AccountsGateway) async throws -> DeviceRowLock {
        let first = try await server.call("POST", "/v1/push", token: session.accessToken, json: ["mutations": []])
        try #require(first.status == 200, "first push: \(first)")
        let connection = try await server.database.database.connect()
        try await connection.execute("begin")
        let locked = try await connection.query(
            "select 1 from ferry.devices where user_id = $1 and device_id = $2 for update",
            [session.userID, session.deviceID])
        try #require(locked.count == 1, "no ferry.devices row for \(session.deviceID)")
        return DeviceRowLock(connection: connection)
    }

    /// Ends the transaction: the waiting pushes go on.
    func release() async throws {
        try await connection.execute("rollback")
        await connection.close()
    }
}

/// A request on a connection of its own whose answer is read later, or never.
final class OpenRequest: @unchecked Sendable {
    private let client: HTTPTestClient

    /// Connects and sends `POST path` with a JSON `body` and `token`; reads nothing.
    init(port: Int, path: String, token: String, body: String) throws {
        client = try HTTPTestClient(port: port, timeout: 30)
        try client.send(
            "POST \(path) HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(token)\r\n"
                + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
    }

    /// Reads the answer and closes the connection.
    func answer() async throws -> APIResponse {
        try await offload {
            defer { self.client.close() }
            return APIResponse(raw: try self.client.readResponse())
        }
    }

    /// Leaves without reading the answer.
    func close() { client.close() }

    /// Leaves with a TCP reset.
    func reset() { client.reset() }
}

extension AccountsGateway {
    /// Sends `count` empty pushes as `session`, each on its own connection, and waits until
    /// the gateway counts them in flight and each waits in PostgreSQL on the device's row,
    /// which the caller has locked.
    func holdPushes(_ session: TestSession, count: Int) async throws -> [OpenRequest] {
        let device = RequestsInFlight.Device(userID: session.userID, deviceID: session.deviceID)
        let before = gateway.requests.perDevice.count(device)
        let waitingBefore = try await pushBackendsWaitingOnALock().count
        let port = self.port
        var held: [OpenRequest] = []
        for _ in 0..<count {
            held.append(
                try OpenRequest(port: port, path: "/v1/push", token: session.accessToken, body: #"{"mutations": []}"#))
        }
        try await eventually("\(count) pushes in flight, waiting on the device's row") {
            try await pushBackendsWaitingOnALock().count == waitingBefore + count
        }
        #expect(gateway.requests.perDevice.count(device) == before + count)
        return held
    }

    /// The pids of the gateway's backends running `ferry.push` that wait on a lock.
    func pushBackendsWaitingOnALock() async throws -> [String] {
        try await database.rows(
            """
            select pid::text from pg_catalog.pg_stat_activity
            where datname = current_database() and application_name = 'ferry'
                and query like '%ferry.push%' and wait_event_type = 'Lock'
            """
        ).compactMap { $0[0] }
    }
}
