import Dispatch
import FerryHTTP
import FerryLoop
import FerryTestSupport
import Foundation
import Synchronization
import Testing

/// What a server reads of a request body, over real sockets: a route's gate decides at the
/// head, before any of the body is read or `100 Continue` is sent; a body must arrive whole
/// within the body timeout; and every body held counts toward one budget for the server.
@Suite(.hangLimit, .tagSelection) struct BodyAdmissionTests {
    /// A server whose `/private/echo` needs `X-User: good` (its gate), with `/public/echo`
    /// beside it; both answer the body they got and count the handlers that ran.
    private final class Counter: Sendable {
        private let count = Atomic<Int>(0)
        func add() { count.add(1, ordering: .relaxed) }
        var value: Int { count.load(ordering: .relaxed) }
    }

    private final class Server {
        let group = LoopGroup(count: 1)
        let server: HTTPServer
        let port: Int
        /// Handlers that ran.
        let handled = Counter()

        init(configuration: HTTPServerConfiguration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)) throws {
            let handled = handled
            var configuration = configuration
            configuration.limits.pathBodyLimits = [
                PathBodyLimit(path: "/private/echo", maxBytes: 32 << 20, message: "too big for /private/echo")
            ]
            let routes: @Sendable (EventLoop) -> Router = { _ in
                var router = Router()
                router.post("/public/echo") { request, responder in
                    handled.add()
                    responder.respond(HTTPResponse(status: .ok, body: request.body))
                }
                router.group(gate: Server.gate) { routes in
                    routes.post("/private/echo") { request, user, responder in
                        handled.add()
                        responder.respond(.text("\(user) sent \(request.body.count) bytes"))
                    }
                }
                return router
            }
            server = HTTPServer(configuration: configuration, group: group, router: routes)
            port = try server.start().port
        }

        static func gate(_ request: HTTPRequest) -> Admission<String> {
            guard request.headers["X-User"] == "good" else {
                return .refused(.error(status: 401, code: "unauthorized", message: "an access token is required"))
            }
            return .admitted("good")
        }

        func client(timeout: Double = 5) throws -> HTTPTestClient { try HTTPTestClient(port: port, timeout: timeout) }

        func stop() {
            let done = DispatchSemaphore(value: 0)
            server.shutdown(deadline: .now + .seconds(2)) { done.signal() }
            _ = done.wait(timeout: .now() + 5)
            group.stop()
        }
    }

    private static let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 64 << 10)

    @Test func aLargeBodyWithoutItsTokenIsRefusedBeforeItIsSentAndTheConnectionCloses() throws {
        let server = try Server()
        defer { server.stop() }
        let client = try server.client()
        try client.send("POST /private/echo HTTP/1.1\r\nHost: t\r\nContent-Length: \(16 << 20)\r\n\r\n")
        // A quarter of the body, then the answer is read while three quarters are unsent.
        for _ in 0..<64 { _ = try? client.sendWithoutWaiting(Self.chunk) }
        let response = try client.readResponse()
        #expect(response.status == 401, "\(response.text)")
        #expect(response.text.contains(#""code":"unauthorized""#))
        #expect(response.header("Connection") == "close")
        // The server reads on only to discard, then closes: sending fails or the stream ends.
        var closed = false
        for _ in 0..<2000 where !closed {
            do {
                if try client.sendWithoutWaiting(Self.chunk) == 0 { Thread.sleep(forTimeInterval: 0.005) }
            } catch {
                closed = true
            }
        }
        #expect(closed || client.waitForClose(), "the connection stayed open")
        #expect(server.handled.value == 0)
    }

    @Test func expectContinueWithoutItsTokenIs401NotContinue() throws {
        let server = try Server()
        defer { server.stop() }
        for user in [nil, "bad"] {
            let client = try server.client()
            let header = user.map { "X-User: \($0)\r\n" } ?? ""
            try client.send(
                "POST /private/echo HTTP/1.1\r\nHost: t\r\n\(header)Expect: 100-continue\r\nContent-Length: 5\r\n\r\n")
            let response = try client.readResponse()
            #expect(response.status == 401, "\(user ?? "no user"): \(response.status)")
            #expect(client.waitForClose())
        }
        #expect(server.handled.value == 0)
    }

    @Test func expectContinueWithItsTokenGets100ThenTheAnswer() throws {
        let server = try Server()
        defer { server.stop() }
        let client = try server.client()
        try client.send(
            "POST /private/echo HTTP/1.1\r\nHost: t\r\nX-User: good\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
        )
        #expect(try client.readResponse().status == 100)
        try client.send("hello")
        let response = try client.readResponse()
        #expect(response.status == 200 && response.text == "good sent 5 bytes", "\(response.text)")
        // Kept alive: the next request is served on the same connection.
        #expect(try client.request("POST", "/public/echo", body: Array("again".utf8)).text == "again")
    }

    @Test func aRouteWithoutAGateReadsTheBodyAndABodilessRequestMeetsTheGateOnlyOnce() throws {
        let server = try Server()
        defer { server.stop() }
        let client = try server.client()
        #expect(try client.request("POST", "/public/echo", body: Array("hi".utf8)).text == "hi")
        // No body: the gate answers through the handler's path, and the connection stays.
        let refused = try client.request("POST", "/private/echo")
        #expect(refused.status == 401 && refused.header("Connection") == nil)
        #expect(try client.request("POST", "/public/echo", body: Array("on".utf8)).text == "on")
    }

    @Test func aTricklingBodyIsAnswered408AtTheBodyTimeout() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.bodyTimeout = .milliseconds(400)
        configuration.idleTimeout = .seconds(30)
        let server = try Server(configuration: configuration)
        defer { server.stop() }
        let client = try server.client()
        let started = ContinuousClock.now
        try client.send("POST /public/echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n")
        // A byte every 20 ms (each read waits that long): never idle, never done.
        client.setTimeout(0.02)
        var answer: HTTPTestResponse?
        for _ in 0..<500 where answer == nil {
            _ = try? client.sendWithoutWaiting([UInt8(ascii: "x")])
            answer = try? client.readResponse()
        }
        client.setTimeout(5)
        let response = try #require(answer, "no answer to a trickling body")
        #expect(response.status == 408, "\(response.text)")
        #expect(response.text.contains(#""code":"request_timeout""#))
        #expect(response.header("Connection") == "close")
        #expect(ContinuousClock.now - started >= .milliseconds(350))
        #expect(client.waitForClose())
        #expect(server.handled.value == 0)
    }

    @Test func overTheBudgetABodyIs503WithRetryAfterAndTheServerRecoversOnceBodiesAreDone() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.limits.maxBufferedBodyBytes = 1 << 20
        let server = try Server(configuration: configuration)
        defer { server.stop() }
        // Holds 768 KiB of the budget while its body is still arriving.
        let holder = try server.client()
        try holder.send(
            "POST /private/echo HTTP/1.1\r\nHost: t\r\nX-User: good\r\nContent-Length: \(768 << 10)\r\n\r\n")
        try holder.send(Array(Self.chunk[..<1024]))
        // 512 KiB more would pass the budget: refused before its body, nothing handled.
        try eventuallyBlocking("the holder's body is charged", seconds: 10) {
            let probe = try server.client()
            try probe.send("POST /public/echo HTTP/1.1\r\nHost: t\r\nContent-Length: \(512 << 10)\r\n\r\n")
            let response = try probe.readResponse()
            guard response.status == 503 else { return false }
            #expect(response.header("Retry-After") == "1")
            #expect(response.text.contains(#""code":"unavailable""#) && response.text.contains(#""retryable":true"#))
            #expect(probe.waitForClose())
            return true
        }
        // A body that fits beside the holder's still goes.
        #expect(try server.client().request("POST", "/public/echo", body: Array(Self.chunk[..<1000])).status == 200)
        #expect(server.handled.value == 1)
        // The holder finishes; its answer gives its share back, and the big body goes.
        var remaining = (768 << 10) - 1024
        while remaining > 0 {
            let count = min(remaining, Self.chunk.count)
            try holder.send(Array(Self.chunk[..<count]))
            remaining -= count
        }
        #expect(try holder.readResponse().text == "good sent \(768 << 10) bytes")
        let big = [UInt8](repeating: UInt8(ascii: "b"), count: 900 << 10)
        let answer = try server.client().request("POST", "/public/echo", body: big)
        #expect(answer.status == 200 && answer.body.count == big.count)
    }

    @Test func aChunkedBodyIsChargedAsItArrives() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.limits.maxBufferedBodyBytes = 100 << 10
        let server = try Server(configuration: configuration)
        defer { server.stop() }
        let client = try server.client()
        // 64 KiB chunks on a route whose limit is 1 MiB: the second passes the budget.
        try client.send("POST /public/echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in 0..<2 {
            _ = try? client.send(Array("10000\r\n".utf8) + Self.chunk + Array("\r\n".utf8))
        }
        let response = try client.readResponse()
        #expect(response.status == 503 && response.header("Retry-After") == "1")
        // Its share came back: a body of the whole budget goes.
        let whole = [UInt8](repeating: UInt8(ascii: "w"), count: 100 << 10)
        #expect(try server.client().request("POST", "/public/echo", body: whole).body.count == whole.count)
    }
}
