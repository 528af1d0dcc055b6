import FerryTestSupport
import Foundation
import Testing

/// Request bodies over real sockets against a gateway as `ferry_gateway`: a route that needs
/// a caller checks the token at the head, before any of the body is read (and before `100
/// Continue`); the body budget refuses with `503` and `Retry-After`, applies nothing, and
/// lets the same push through once bodies are done.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct BodyAdmissionHTTPTests {
    static let tables = """
        create table public.items (id text primary key, user_id uuid not null, title text);
        select ferry.register_table('items', 'lww');
        """

    func withItems(arguments: [String] = [], _ body: (AccountsGateway) async throws -> Void) async throws {
        try await withAccountsGateway(arguments: arguments) { server in
            try await server.database.admin.execute(Self.tables)
            try await body(server)
        }
    }

    /// A connection the test keeps across its waits (one thread at a time uses it).
    private final class Held: @unchecked Sendable {
        let client: HTTPTestClient
        init(port: Int) throws { client = try HTTPTestClient(port: port, timeout: 15) }
    }

    /// Each push result's status.
    static func statuses(_ response: APIResponse) -> [String]? {
        (response.value("results") as? [[String: Any]])?.map { $0["status"] as? String ?? "?" }
    }

    private static let chunk = [UInt8](repeating: UInt8(ascii: " "), count: 64 << 10)

    @Test func anUnauthenticatedWatermelonPushIsRefusedWhileItsBodyIsStillBeingSent() async throws {
        try await withItems { server in
            let response = try await offload {
                let client = try HTTPTestClient(port: server.port, timeout: 15)
                defer { client.close() }
                try client.send(
                    "POST /v1/watermelon/sync?last_pulled_at=1 HTTP/1.1\r\nHost: t\r\n"
                        + "Content-Length: \(16 << 20)\r\n\r\n")
                // A sixteenth of the body; the 401 is read with the rest unsent.
                for _ in 0..<16 { _ = try? client.sendWithoutWaiting(Self.chunk) }
                let response = try client.readResponse()
                // Then the gateway closes: a send fails, or the stream ends.
                var closed = false
                for _ in 0..<4000 where !closed {
                    do {
                        if try client.sendWithoutWaiting(Self.chunk) == 0 { Thread.sleep(forTimeInterval: 0.005) }
                    } catch {
                        closed = true
                    }
                }
                return (response, closed || client.waitForClose())
            }
            #expect(response.0.status == 401 && response.0.text.contains(#""code":"unauthorized""#), "\(response.0)")
            #expect(response.0.header("Connection") == "close")
            #expect(response.1, "the connection stayed open")
        }
    }

    @Test func expectContinueIsAnsweredOnlyOnceTheTokenIsGood() async throws {
        try await withItems { server in
            let device = try await server.signUpAnonymous()
            let body =
                #"{"mutations": [{"id": 1, "table": "items", "op": "upsert", "row": {"id": "i-1", "title": "a"}}]}"#
            let head =
                "POST /v1/push HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: \(body.utf8.count)\r\n"
            for authorization in ["", "Authorization: Bearer not-a-token\r\n"] {
                let (status, closed) = try await offload {
                    let client = try HTTPTestClient(port: server.port, timeout: 15)
                    defer { client.close() }
                    try client.send(head + authorization + "\r\n")
                    let response = try client.readResponse()
                    return (response.status, client.waitForClose())
                }
                #expect(status == 401 && closed, "\(authorization): \(status)")
            }
            let (continued, answer) = try await offload {
                let client = try HTTPTestClient(port: server.port, timeout: 15)
                defer { client.close() }
                try client.send(head + "Authorization: Bearer \(device.accessToken)\r\n\r\n")
                let continued = try client.readResponse().status
                try client.send(body)
                return (continued, try client.readResponse())
            }
            #expect(continued == 100)
            #expect(answer.status == 200 && Self.statuses(APIResponse(raw: answer)) == ["applied"], "\(answer.text)")
            #expect(try await server.database.value("select title from public.items where id = 'i-1'") == "a")
        }
    }

    @Test func overTheBodyBudgetAPushIs503AppliesNothingAndGoesThroughAfter() async throws {
        try await withItems(arguments: [
            "--max-body-bytes", "8192", "--watermelon-max-body-bytes", "8192", "--body-buffer-bytes", "10000",
        ]) { server in
            let device = try await server.signUpAnonymous()
            let authorization = "Authorization: Bearer \(device.accessToken)\r\n"
            // Holds 8000 bytes of the 10000 while its body is still arriving.
            let held = try Held(port: server.port)
            let holder = held.client
            defer { holder.close() }
            let heldBody = #"{"mutations": []}"# + String(repeating: " ", count: 8000 - 17)
            // Its `100 Continue` comes once its head was admitted, which charged the
            // budget: only then can the pushes below meet what it holds.
            try holder.send(
                "POST /v1/push HTTP/1.1\r\nHost: t\r\n\(authorization)Expect: 100-continue\r\nContent-Length: 8000\r\n\r\n"
            )
            let continued = try await offload { try held.client.readResponse().status }
            try #require(continued == 100, "the holder's head was not admitted: \(continued)")
            try holder.send(Array(heldBody.utf8.prefix(100)))
            let push =
                Array(
                    #"{"mutations": [{"id": 1, "table": "items", "op": "upsert", "row": {"id": "i-1", "title": "a"}}]}"#
                        .utf8) + [UInt8](repeating: UInt8(ascii: " "), count: 3000)
            let refused = try await eventually("a push refused for the body budget") { () -> APIResponse? in
                let response = try await server.call("POST", "/v1/push", token: device.accessToken, body: push)
                return response.status == 503 ? response : nil
            }
            #expect(refused.code == "unavailable" && refused.header("Retry-After") == "1", "\(refused)")
            #expect(refused.value("error", "retryable") as? Bool == true)
            #expect(try await server.database.value("select count(*) from public.items") == "0")
            // The holder's body completes and is answered; its share comes back.
            try holder.send(Array(heldBody.utf8.dropFirst(100)))
            let first = try await offload { try held.client.readResponse() }
            #expect(first.status == 200, "\(first)")
            let retried = try await server.call("POST", "/v1/push", token: device.accessToken, body: push)
            #expect(retried.status == 200 && Self.statuses(retried) == ["applied"], "\(retried)")
            #expect(try await server.database.value("select count(*) from public.items") == "1")
        }
    }
}
