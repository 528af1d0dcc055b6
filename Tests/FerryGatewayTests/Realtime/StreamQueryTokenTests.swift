import FerryTestSupport
import Foundation
import Testing

/// PROTOCOL.md "Conventions": stream endpoints also take the token as `?access_token=`,
/// since browsers cannot set headers on EventSource or WebSocket; docs/PROTOCOL.md
/// ("Opening"): the `Authorization` header wins over it, and other routes ignore it.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct StreamQueryTokenTests {
    /// The refusal of a stream opened with `token` in the query string: "status body", or
    /// "opened" when it opened.
    func opening(_ harness: AccountsGateway, _ transport: StreamTestClient.Transport, queryToken: String) async throws
        -> String
    {
        let port = harness.port
        return try await offload { () -> String in
            do {
                let stream = try StreamTestClient(
                    port: port, transport: transport, token: queryToken, tokenInQuery: true)
                stream.close()
                return "opened"
            } catch let error as HTTPTestClientError {
                return error.description
            }
        }
    }

    /// The status of a stream request carrying both an `Authorization` header and a
    /// query token.
    func status(
        _ harness: AccountsGateway, _ transport: StreamTestClient.Transport, header: String, query: String
    ) async throws -> Int {
        let port = harness.port
        let head =
            transport == .webSocket
            ? "GET /v1/stream?access_token=\(query) HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            : "GET /v1/events?access_token=\(query) HTTP/1.1\r\nAccept: text/event-stream\r\n"
        return try await offload {
            let client = try HTTPTestClient(port: port)
            defer { client.close() }
            try client.send(head + "Host: test\r\nAuthorization: Bearer \(header)\r\n\r\n")
            return try client.readResponse(toHead: true).status
        }
    }

    @Test(arguments: StreamTestClient.Transport.allCases)
    func aStreamOpensWithTheTokenInTheQueryString(transport: StreamTestClient.Transport) async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            let stream = try await harness.openStream(session, transport, tokenInQuery: true)
            let hello = try await stream.nextMessageAsync(ofType: "hello")
            #expect(hello.string("user_id") == session.userID && hello.string("device_id") == session.deviceID)
            stream.close()
            // The query token is checked like a header's.
            let expired = try await opening(
                harness, transport, queryToken: harness.token(for: session, expiresIn: -120))
            #expect(expired.hasPrefix("401 ") && expired.contains(#""code":"token_expired""#), "\(expired)")
            let garbage = try await opening(harness, transport, queryToken: "not.a.token")
            #expect(garbage.hasPrefix("401 ") && garbage.contains(#""code":"unauthorized""#), "\(garbage)")
        }
    }

    @Test(arguments: StreamTestClient.Transport.allCases)
    func theAuthorizationHeaderWinsOverTheQueryToken(transport: StreamTestClient.Transport) async throws {
        try await withAccountsGateway { harness in
            let token = try await harness.signUpAnonymous().accessToken
            let opened = transport == .webSocket ? 101 : 200
            #expect(try await status(harness, transport, header: token, query: "not.a.token") == opened)
            #expect(try await status(harness, transport, header: "not.a.token", query: token) == 401)
        }
    }

    @Test func routesOtherThanStreamsIgnoreTheQueryToken() async throws {
        try await withAccountsGateway { harness in
            let token = try await harness.signUpAnonymous().accessToken
            let response = try await harness.call("GET", "/v1/auth/user?access_token=\(token)")
            #expect(response.status == 401 && response.code == "unauthorized", "\(response)")
        }
    }
}
