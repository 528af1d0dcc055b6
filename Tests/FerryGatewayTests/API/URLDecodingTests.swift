import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// A path segment or query value that does not percent-decode to text (a malformed
/// escape, bytes that are not UTF-8, a NUL) is `400`, over real HTTP, before anything
/// is read or written: `invalid_request`, or `invalid_cursor` for the cursor.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct URLDecodingTests {
    /// Rows of `active_game`, whoever owns them.
    func lockRows(_ server: AccountsGateway) async throws -> [[String?]] {
        try await server.database.rows("select slot, _lock_device::text from public.active_game order by slot")
    }

    /// `cur%00rent` claimed `cur` before (cut at the NUL); a bad escape was stored raw.
    @Test func aLockKeyThatDoesNotDecodeIs400AndClaimsNothing() async throws {
        try await withAccountsGateway(examples: ["puzzle"]) { server in
            let session = try await server.signUpAnonymous()
            for key in ["cur%00rent", "cur%zzrent", "cur%ffrent", "cur%", "%c3", "%ed%a0%80"] {
                for action in ["claim", "heartbeat", "release"] {
                    let response = try await server.call(
                        "POST", "/v1/locks/active_game/\(key)/\(action)", token: session.accessToken)
                    #expect(
                        response.status == 400 && response.code == "invalid_request", "\(action) \(key): \(response)")
                    #expect(response.string("error", "message")?.contains("key") == true, "\(response)")
                }
            }
            #expect(try await lockRows(server).isEmpty)
        }
    }

    @Test func aLockKeyThatDecodesIsTheDecodedText() async throws {
        try await withAccountsGateway(examples: ["puzzle"]) { server in
            let session = try await server.signUpAnonymous()
            let claimed = try await server.call(
                "POST", "/v1/locks/active_game/cur%72ent+1/claim", token: session.accessToken)
            #expect(claimed.status == 200, "\(claimed)")
            #expect(try await lockRows(server) == [["current+1", session.deviceID]])
        }
    }

    @Test func aRequestTargetThatIsNotUTF8Is400() async throws {
        try await withAccountsGateway(examples: ["puzzle"]) { server in
            let session = try await server.signUpAnonymous()
            let port = server.port
            let response = try await offload {
                let client = try HTTPTestClient(port: port, timeout: 15)
                defer { client.close() }
                try client.send(
                    Array("POST /v1/locks/active_game/".utf8) + [0xFF, 0xFE]
                        + Array(
                            "/claim HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \(session.accessToken)\r\n\r\n".utf8))
                return try client.readResponse()
            }
            #expect(response.status == 400 && response.text.contains(#""code":"invalid_request""#), "\(response.text)")
            #expect(try await lockRows(server).isEmpty)
        }
    }

    /// `cursor` answers `invalid_cursor` (a full first load before), `limit`
    /// `invalid_request` (the default limit before).
    @Test func aPullQueryValueThatDoesNotDecodeIs400WithItsCode() async throws {
        try await withAccountsGateway { server in
            let session = try await server.signUpAnonymous()
            for (parameter, code) in [("cursor", "invalid_cursor"), ("limit", "invalid_request")] {
                for value in ["%ff%fe", "%00", "1%00", "abc%zz", "%zz", "%"] {
                    let response = try await server.call(
                        "GET", "/v1/pull?\(parameter)=\(value)", token: session.accessToken)
                    #expect(response.status == 400 && response.code == code, "\(parameter)=\(value): \(response)")
                }
            }
            // Decoded, a value is read as usual.
            let encoded = try await server.call("GET", "/v1/pull?limit=%31%30", token: session.accessToken)
            #expect(encoded.status == 200, "\(encoded)")
        }
    }

    @Test func aStreamTokenInTheQueryThatDoesNotDecodeIsInvalidRequest() async throws {
        try await withAccountsGateway { server in
            let session = try await server.signUpAnonymous()
            let refused = try await server.call("GET", "/v1/events?access_token=\(session.accessToken)%zz")
            #expect(refused.status == 400 && refused.code == "invalid_request", "\(refused)")
            // Percent-encoded dots decode to the token itself.
            let encoded = session.accessToken.replacingOccurrences(of: ".", with: "%2E")
            let stream = try await offload {
                let client = try HTTPTestClient(port: server.port, timeout: 15)
                defer { client.close() }
                try client.send("GET /v1/events?access_token=\(encoded) HTTP/1.1\r\nHost: t\r\n\r\n")
                return try client.readResponse(toHead: true)
            }
            #expect(stream.status == 200 && stream.header("Content-Type") == "text/event-stream", "\(stream.status)")
        }
    }
}
