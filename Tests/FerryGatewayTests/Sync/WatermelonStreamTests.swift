import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// `GET /v1/watermelon/sync` streamed (WatermelonPullStream): a chunked answer read from
/// one cursor in batches, whole JSON only when it is whole, cut short (never a status
/// code) when something fails after the first byte, and its transaction ended when the
/// client goes away.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct WatermelonStreamTests {
    /// `count` tasks of `user`, each with a title of `padding` bytes.
    func seed(_ server: AccountsGateway, user: String, count: Int, padding: Int = 400, prefix: String = "t")
        async throws
    {
        try await server.database.admin.execute(
            """
            insert into tasks (id, user_id, title)
            select '\(prefix)' || n, '\(user)', repeat('x', \(padding)) from generate_series(1, \(count)) n
            """)
    }

    /// Sends a first sync on `client` and reads the head only.
    func startPull(_ client: HTTPTestClient, _ session: TestSession, query: String = "") throws -> HTTPTestResponse {
        try client.send(
            "GET \(WatermelonRoutes.path)\(query) HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(session.accessToken)\r\n\r\n"
        )
        return try client.readResponse(toHead: true)
    }

    /// What reading the rest of a chunked body on `client` found: its size when whole, else the error.
    static func restOfTheBody(_ client: HTTPTestClient) -> String {
        do {
            return "a whole answer of \(try client.readChunkedBody().count) bytes"
        } catch {
            return "\(error)"
        }
    }

    /// The gateway's backends inside a transaction (a stream's), as pg_stat_activity shows them.
    func streamingBackends(_ server: AccountsGateway) async throws -> Int {
        Int(
            try await server.database.value(
                """
                select count(*) from pg_stat_activity
                where datname = current_database() and usename = 'ferry_gateway' and xact_start is not null
                    and pid <> pg_backend_pid()
                """) ?? "") ?? -1
    }

    @Test func aBigFirstSyncIsOneChunkedAnswerNoStatementTimeoutCuts() async throws {
        // 40,000 records of ~0.5 KB (~20 MB) under a 1.5 s statement timeout, which each
        // batch is far within and the whole answer is not meant to be: the client stops
        // reading for 2.5 s after the head, so the answer outlasts the timeout however fast
        // the machine streams (a size alone made it load-sensitive: a loaded CI machine once
        // took a batch past 250 ms of a 500 ms timeout).
        try await withAccountsGateway(arguments: ["--statement-timeout-ms", "1500"], examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            try await seed(server, user: phone.userID, count: 40_000)
            try await server.database.admin.execute("delete from tasks where id = 't1'")
            nonisolated(unsafe) let client = try HTTPTestClient(
                port: server.port, timeout: 60, receiveBufferBytes: 4096)
            defer { client.close() }
            let response = try startPull(client, phone)
            try await Task.sleep(for: .milliseconds(2_500))
            let body = try await offload { try client.readChunkedBody() }
            #expect(response.status == 200)
            #expect(response.header("Transfer-Encoding") == "chunked")
            #expect(response.header("Content-Type") == "application/json")
            #expect(response.header("Content-Length") == nil)
            let answer = try WatermelonPullAnswer(text: String(decoding: body, as: UTF8.self))
            #expect(Set(answer.object.keys) == ["changes", "timestamp"])
            #expect(answer.tables == ["tasks"], "\(answer.tables)")
            let ids = answer.updated("tasks").compactMap { $0["id"] as? String }
            #expect(ids.count == 39_999 && Set(ids).count == 39_999 && !ids.contains("t1"))
            #expect(answer.created("tasks").isEmpty && answer.deleted("tasks").isEmpty)
            #expect(answer.timestamp > 0)

            // The timestamp names the answer's snapshot: the next sync brings what came after.
            try await server.database.admin.execute("delete from tasks where id = 't3'")
            // Not streamed, so the statement timeout holds it: on a loaded machine its scan of
            // 40,000 rows can take longer, answered 503 (retryable), as a client would retry
            // it; a few tries, each asserting nothing but the last.
            var next = try await server.call(
                "GET", "\(WatermelonRoutes.path)?last_pulled_at=\(answer.timestamp)", token: phone.accessToken)
            for _ in 0..<5 where next.status == 503 {
                next = try await server.call(
                    "GET", "\(WatermelonRoutes.path)?last_pulled_at=\(answer.timestamp)", token: phone.accessToken)
            }
            #expect(next.value("changes", "tasks", "deleted") as? [String] == ["t3"], "\(next)")
            #expect(try await streamingBackends(server) == 0)
        }
    }

    @Test func anAnswerOverItsTimeBoundIsCutShortNotCompleted() async throws {
        try await withAccountsGateway(arguments: ["--watermelon-pull-seconds", "1"], examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            try await seed(server, user: phone.userID, count: 20_000, padding: 1_000)
            // A client that reads the head and then nothing: the socket fills, the gateway
            // waits for it to drain, and the second passes.
            // Read off the test's task (offload) as well as on it, one at a time.
            nonisolated(unsafe) let client = try HTTPTestClient(
                port: server.port, timeout: 30, receiveBufferBytes: 4096)
            defer { client.close() }
            let head = try startPull(client, phone)
            #expect(head.status == 200 && head.header("Transfer-Encoding") == "chunked")
            try await Task.sleep(for: .seconds(2))
            let rest = try await offload { Self.restOfTheBody(client) }
            #expect(rest.contains("cut short"), "\(rest)")
            try await eventually("the stream's transaction ended") { try await streamingBackends(server) == 0 }
            // The gateway serves the next sync as usual (a small one: within the second).
            try await server.database.admin.execute(
                "begin; set local ferry.hard_delete = on; delete from tasks where id <> 't1'; commit;")
            #expect(try await server.watermelonPull(phone) > 0)
        }
    }

    @Test func aDatabaseFailureMidStreamCutsTheAnswerShort() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            try await seed(server, user: phone.userID, count: 20_000, padding: 1_000)
            // Read off the test's task (offload) as well as on it, one at a time.
            nonisolated(unsafe) let client = try HTTPTestClient(
                port: server.port, timeout: 30, receiveBufferBytes: 4096)
            defer { client.close() }
            _ = try startPull(client, phone)
            try await eventually("a stream waits on its client inside its transaction") {
                try await streamingBackends(server) == 1
            }
            try await server.database.admin.query(
                """
                select pg_terminate_backend(pid) from pg_stat_activity
                where datname = current_database() and usename = 'ferry_gateway' and xact_start is not null
                """)
            let rest = try await offload { Self.restOfTheBody(client) }
            #expect(rest.contains("cut short"), "\(rest)")
            #expect(try await server.watermelonPull(phone) > 0)
        }
    }

    @Test func aClientThatGoesAwayEndsTheTransaction() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            try await seed(server, user: phone.userID, count: 20_000, padding: 1_000)
            let client = try HTTPTestClient(port: server.port, timeout: 30, receiveBufferBytes: 4096)
            _ = try startPull(client, phone)
            try await eventually("a stream waits on its client inside its transaction") {
                try await streamingBackends(server) == 1
            }
            client.reset()
            try await eventually("the stream's transaction ended") { try await streamingBackends(server) == 0 }
            #expect(try await server.watermelonPull(phone) > 0)
        }
    }

    @Test func anAnswerTheFirstBatchHoldsIsAnOrdinaryAnswerOnAKeptConnection() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            try await seed(server, user: phone.userID, count: WatermelonPullStream.firstBatchRows - 1)
            let (first, second) = try await offload {
                let client = try HTTPTestClient(port: server.port, timeout: 30)
                defer { client.close() }
                let headers = [("Authorization", "Bearer \(phone.accessToken)")]
                return (
                    try client.request("GET", WatermelonRoutes.path, headers: headers),
                    try client.request("GET", WatermelonRoutes.path, headers: headers)
                )
            }
            for response in [first, second] {
                #expect(response.status == 200 && response.header("Transfer-Encoding") == nil)
                #expect(response.header("Content-Length") == String(response.body.count))
                let answer = try WatermelonPullAnswer(text: response.text)
                #expect(answer.updated("tasks").count == WatermelonPullStream.firstBatchRows - 1)
            }
            // One more record and the answer is streamed.
            try await seed(server, user: phone.userID, count: 1, prefix: "more")
            let streamed = try await offload {
                let client = try HTTPTestClient(port: server.port, timeout: 30)
                defer { client.close() }
                return try client.request(
                    "GET", WatermelonRoutes.path, headers: [("Authorization", "Bearer \(phone.accessToken)")])
            }
            #expect(streamed.header("Transfer-Encoding") == "chunked")
            #expect(
                try WatermelonPullAnswer(text: streamed.text).updated("tasks").count
                    == WatermelonPullStream.firstBatchRows)
        }
    }

    @Test func tablesWithNothingToSendAreThereWithEmptyArrays() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            let response = try await server.call("GET", WatermelonRoutes.path, token: phone.accessToken)
            #expect(response.status == 200)
            let empty = #"{"changes":{"tasks":{"created":[],"updated":[],"deleted":[]}},"timestamp":"#
            #expect(response.raw.text.hasPrefix(empty), "\(response)")
        }
    }
}
