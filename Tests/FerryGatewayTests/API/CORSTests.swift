import FerryTestSupport
import Foundation
import Testing

/// Browsers' cross-origin calls (`FERRY_CORS_ORIGINS`): preflights answered for the
/// routes a web client calls with the methods and headers it sends, the allowed origin
/// echoed with `Vary: Origin` on every answer (a 401 before the body included), nothing
/// for another origin, and nothing allowed when the setting is empty.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct CORSTests {
    static let origin = "http://app.test:5173"

    static func preflight(
        _ gateway: AccountsGateway, _ path: String, origin: String = origin, method: String = "POST"
    ) async throws -> APIResponse {
        try await gateway.call(
            "OPTIONS", path,
            headers: [
                ("Origin", origin), ("Access-Control-Request-Method", method),
                ("Access-Control-Request-Headers", "authorization, content-type"),
            ])
    }

    @Test func anAllowedOriginsPreflightIsAnsweredForEveryRouteABrowserCalls() async throws {
        try await withAccountsGateway(arguments: ["--cors-origins", "https://other.test, \(Self.origin)"]) {
            gateway in
            let routes: [(String, String)] = [
                ("/v1/auth/anonymous", "POST"), ("/v1/auth/refresh", "POST"), ("/v1/auth/user", "GET"),
                ("/v1/auth/link", "POST"), ("/v1/auth/signin", "POST"), ("/v1/auth/signout", "POST"),
                ("/v1/auth/password", "POST"), ("/v1/auth/recover", "POST"), ("/v1/auth/recover/confirm", "POST"),
                ("/v1/auth/confirm", "POST"), ("/v1/auth/confirm/resend", "POST"), ("/v1/account", "DELETE"),
                ("/v1/push", "POST"), ("/v1/pull", "GET"), ("/v1/schema", "GET"), ("/v1/events", "GET"),
                ("/v1/locks/active_game/current/claim", "POST"), ("/v1/locks/active_game/current/heartbeat", "POST"),
                ("/v1/locks/active_game/current/release", "POST"),
            ]
            for (path, method) in routes {
                let answer = try await Self.preflight(gateway, path, method: method)
                #expect(answer.status == 204, "\(path): \(answer)")
                #expect(answer.header("Access-Control-Allow-Origin") == Self.origin, "\(path)")
                let methods = answer.header("Access-Control-Allow-Methods") ?? ""
                #expect(methods.contains(method), "\(path): \(methods)")
                let headers = (answer.header("Access-Control-Allow-Headers") ?? "").lowercased()
                #expect(headers.contains("authorization") && headers.contains("content-type"), "\(path)")
                #expect(answer.header("Vary")?.contains("Origin") == true, "\(path)")
            }
        }
    }

    @Test func answersCarryTheAllowedOriginAndOthersGetNoCORSHeaders() async throws {
        try await withAccountsGateway(arguments: ["--cors-origins", Self.origin]) { gateway in
            let device = UUID().uuidString.lowercased()
            let signUp = try await gateway.call(
                "POST", "/v1/auth/anonymous", json: ["device_id": device], headers: [("Origin", Self.origin)])
            #expect(signUp.status == 201)
            #expect(signUp.header("Access-Control-Allow-Origin") == Self.origin)
            #expect(signUp.header("Vary")?.contains("Origin") == true)
            #expect(signUp.header("Access-Control-Expose-Headers")?.contains("Retry-After") == true)

            // A refusal before the body is read carries them too: the page reads the 401.
            let refused = try await gateway.call(
                "POST", "/v1/push", token: "not-a-token", json: ["mutations": []],
                headers: [("Origin", Self.origin)])
            #expect(refused.status == 401)
            #expect(refused.header("Access-Control-Allow-Origin") == Self.origin)
            let missing = try await gateway.call("GET", "/v1/nothing", headers: [("Origin", Self.origin)])
            #expect(missing.status == 404)
            #expect(missing.header("Access-Control-Allow-Origin") == Self.origin)

            let other = try await Self.preflight(gateway, "/v1/push", origin: "http://evil.test")
            #expect(other.status == 403, "\(other)")
            #expect(other.code == "forbidden")
            #expect(other.header("Access-Control-Allow-Origin") == nil)
            #expect(other.header("Access-Control-Allow-Methods") == nil)
            let otherCall = try await gateway.call(
                "POST", "/v1/auth/anonymous", json: ["device_id": UUID().uuidString.lowercased()],
                headers: [("Origin", "http://evil.test")])
            #expect(otherCall.header("Access-Control-Allow-Origin") == nil)
            // Not a preflight (no Access-Control-Request-Method): OPTIONS is just a method.
            let plain = try await gateway.call("OPTIONS", "/v1/push", headers: [("Origin", Self.origin)])
            #expect(plain.status == 405)
        }
    }

    /// The SSE stream writes its own head after taking the connection over: an allowed
    /// origin gets the CORS headers there too (a page reads the stream with `fetch`),
    /// another origin none; the WebSocket needs none (browsers do not apply CORS to it).
    @Test func anEventStreamsHeadCarriesTheAllowedOrigin() async throws {
        try await withAccountsGateway(arguments: ["--cors-origins", Self.origin]) { gateway in
            let session = try await gateway.signUpAnonymous()
            let port = gateway.port
            for (origin, allowed) in [(Self.origin, true), ("http://evil.test", false)] {
                let stream = try await offload {
                    try StreamTestClient(
                        port: port, transport: .serverSentEvents, token: session.accessToken,
                        headers: [("Origin", origin)])
                }
                let head = stream.responseHead
                #expect(head.header("Access-Control-Allow-Origin") == (allowed ? origin : nil), "\(origin)")
                #expect(head.header("Vary")?.contains("Origin") == (allowed ? true : nil), "\(origin)")
                if allowed { #expect(head.header("Access-Control-Expose-Headers")?.contains("Retry-After") == true) }
                _ = try await stream.nextMessageAsync(ofType: "hello")
                stream.close()
            }
        }
    }

    @Test func serveAllowsNoOriginByDefault() async throws {
        try await withAccountsGateway { gateway in
            let answer = try await Self.preflight(gateway, "/v1/auth/anonymous")
            #expect(answer.status == 403, "\(answer)")
            #expect(answer.header("Access-Control-Allow-Origin") == nil)
            let call = try await gateway.call(
                "POST", "/v1/auth/anonymous", json: ["device_id": UUID().uuidString.lowercased()],
                headers: [("Origin", Self.origin)])
            #expect(call.status == 201)
            #expect(call.header("Access-Control-Allow-Origin") == nil)
        }
    }
}
