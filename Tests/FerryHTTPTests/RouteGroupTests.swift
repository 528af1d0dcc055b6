import Dispatch
import FerryHTTP
import FerryLoop
import FerryTestSupport
import Testing

/// A ``RouteGroup``'s gate over real sockets: it runs before every handler of its group
/// (HEAD included), a refusal is the answer and no handler runs, an admission hands the
/// handler what the gate found, and routes outside the group never see the gate.
@Suite(.hangLimit, .tagSelection) struct RouteGroupTests {
    /// A server whose `/private/*` routes need `X-User`; `/public` does not.
    private final class GatedServer {
        let group = LoopGroup(count: 1)
        let server: HTTPServer
        let port: Int

        init() throws {
            let routes: @Sendable (EventLoop) -> Router = { _ in
                var router = Router()
                router.get("/public") { _, responder in responder.respond(.text("public")) }
                router.group(gate: Self.gate) { routes in
                    routes.get("/private/whoami") { _, user, responder in responder.respond(.text("you are \(user)")) }
                    routes.post("/private/:thing") { request, user, responder in
                        responder.respond(.text("\(user) posted \(request.pathParameters["thing"] ?? "?")"))
                    }
                }
                return router
            }
            server = HTTPServer(
                configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0), group: group, router: routes)
            port = try server.start().port
        }

        static func gate(_ request: HTTPRequest) -> Admission<String> {
            guard let user = request.headers["X-User"], !user.isEmpty else {
                return .refused(.error(status: 401, code: "unauthorized", message: "who are you?"))
            }
            return .admitted(user)
        }

        func request(_ method: String, _ path: String, user: String? = nil) throws -> HTTPTestResponse {
            let client = try HTTPTestClient(port: port, timeout: 5)
            defer { client.close() }
            return try client.request(method, path, headers: user.map { [("X-User", $0)] } ?? [])
        }

        func stop() {
            let done = DispatchSemaphore(value: 0)
            server.shutdown(deadline: .now + .seconds(2)) { done.signal() }
            _ = done.wait(timeout: .now() + 5)
            group.stop()
        }
    }

    @Test func theGateAnswersARefusedRequestAndNoHandlerRuns() throws {
        let server = try GatedServer()
        defer { server.stop() }
        for (method, path) in [("GET", "/private/whoami"), ("POST", "/private/note"), ("HEAD", "/private/whoami")] {
            let response = try server.request(method, path)
            #expect(response.status == 401, "\(method) \(path)")
            if method != "HEAD" {
                #expect(response.text.contains(#""code":"unauthorized""#), "\(method) \(path): \(response.text)")
            }
        }
    }

    @Test func anAdmittedRequestsHandlerGetsWhatTheGateFound() throws {
        let server = try GatedServer()
        defer { server.stop() }
        #expect(try server.request("GET", "/private/whoami", user: "ada").text == "you are ada")
        #expect(try server.request("POST", "/private/note", user: "bob").text == "bob posted note")
    }

    @Test func routesOutsideTheGroupAreNotGated() throws {
        let server = try GatedServer()
        defer { server.stop() }
        let response = try server.request("GET", "/public")
        #expect(response.status == 200 && response.text == "public")
        // What the group has not for this method or path is the router's 405 or 404, not
        // the gate's 401: the gate runs only for a matched route.
        #expect(try server.request("GET", "/private/note").status == 405)
        #expect(try server.request("GET", "/private/note/more").status == 404)
    }
}
