import Dispatch
import FerryHTTP
import FerryLoop
import FerryTestSupport
import Foundation
import Synchronization
import Testing

/// Counts what the server reports, for tests; one per loop, read from the test thread.
private final class Recorder: HTTPObserver, @unchecked Sendable {
    private let lock = NSLock()
    private var _records: [HTTPResponseRecord] = []
    private var _opened = 0
    private var _closed = 0
    private var _mostUnsentTakenOver = 0
    private var _held = 0
    private var _released = false

    var records: [HTTPResponseRecord] { lock.withLock { _records } }
    /// The most bytes a taken-over connection ever had unsent (see ``Echo``).
    var mostUnsentTakenOver: Int { lock.withLock { _mostUnsentTakenOver } }
    func noteUnsentTakenOver(_ bytes: Int) { lock.withLock { _mostUnsentTakenOver = max(_mostUnsentTakenOver, bytes) } }
    var opened: Int { lock.withLock { _opened } }
    /// `/held` requests whose handler has run: each is in flight until ``release()``.
    var held: Int { lock.withLock { _held } }
    func noteHeld() { lock.withLock { _held += 1 } }
    /// Lets every `/held` request be answered (within 5 ms).
    func release() { lock.withLock { _released = true } }
    var isReleased: Bool { lock.withLock { _released } }
    var closed: Int { lock.withLock { _closed } }

    func connectionOpened(remoteAddress: String?) { lock.withLock { _opened += 1 } }
    func responseSent(_ record: HTTPResponseRecord) { lock.withLock { _records.append(record) } }
    func connectionClosed(remoteAddress: String?) { lock.withLock { _closed += 1 } }
}

/// Echoes what it reads: the protocol a taken-over connection speaks in tests. Reports
/// its unsent bytes after each write.
private final class Echo: TCPConnectionDelegate {
    let recorder: Recorder
    init(recorder: Recorder) { self.recorder = recorder }
    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        connection.write(bytes)
        recorder.noteUnsentTakenOver(connection.unsentBytes)
    }
    func connectionDidReachEnd(_ connection: TCPConnection) { connection.closeAfterWrites() }
    func connectionDidDrain(_ connection: TCPConnection) {}
    func connectionDidClose(_ connection: TCPConnection, error: LoopError?) {}
}

/// A server on its own loops and port, with the routes every test shares.
private final class TestServer {
    let group: LoopGroup
    let server: HTTPServer
    let port: Int
    let recorder = Recorder()

    init(loops: Int = 1, configuration: HTTPServerConfiguration = HTTPServerConfiguration(host: "127.0.0.1", port: 0))
        throws
    {
        group = LoopGroup(count: loops)
        let recorder = recorder
        let routes: @Sendable (EventLoop) -> Router = { loop in
            var router = Router()
            router.get("/healthz") { _, responder in responder.respond(.text("ok")) }
            router.get("/later/:ms") { request, responder in
                // Answers from a timer: the way a handler answers after a database query.
                let delay = UInt64(request.pathParameters["ms"] ?? "0") ?? 0
                loop.schedule(after: delay) { responder.respond(.text("later \(delay)")) }
            }
            router.get("/held") { _, responder in
                // In flight until the test says so: a request the server holds at a moment
                // the test chooses, however slow the machine.
                recorder.noteHeld()
                func answerOnceReleased() {
                    guard recorder.isReleased else {
                        _ = loop.schedule(after: 5) { answerOnceReleased() }
                        return
                    }
                    responder.respond(.text("released"))
                }
                answerOnceReleased()
            }
            router.post("/echo") { request, responder in
                responder.respond(HTTPResponse(status: .ok, body: request.body))
            }
            router.post("/v1/locks/:table/:key/claim") { request, responder in
                responder.respond(
                    .json(["table": request.pathParameters["table"], "key": request.pathParameters["key"]]))
            }
            router.get("/v1/stream") { _, responder in
                // What the WebSocket layer will do: answer 101 itself and speak another protocol.
                responder.takeOver { tcp, buffered in
                    tcp.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
                    tcp.write(buffered)
                    tcp.delegate = Echo(recorder: recorder)
                    tcp.startReading()
                }
            }
            router.get("/peer") { request, responder in
                responder.respond(.text(request.remoteAddress?.description ?? "none"))
            }
            router.get("/bytes/:count") { request, responder in
                let count = min(Int(request.pathParameters["count"] ?? "0") ?? 0, 1 << 20)
                responder.respond(HTTPResponse(status: .ok, body: [UInt8](repeating: UInt8(ascii: "b"), count: count)))
            }
            return router
        }
        server = HTTPServer(configuration: configuration, group: group, observer: { _ in recorder }, router: routes)
        port = try server.start().port
    }

    func client(timeout: Double = 5) throws -> HTTPTestClient { try HTTPTestClient(port: port, timeout: timeout) }

    /// Waits until `count` `/held` requests are in the server's hands.
    func waitForHeld(_ count: Int = 1) throws {
        try eventuallyBlocking("\(count) /held request(s) in flight", seconds: 10) { recorder.held >= count }
    }

    /// Shuts down (waiting at most a few seconds) and stops the loops.
    func stop() {
        let done = DispatchSemaphore(value: 0)
        server.shutdown(deadline: .now + .seconds(2)) { done.signal() }
        _ = done.wait(timeout: .now() + 5)
        group.stop()
    }
}

@Suite(.hangLimit, .tagSelection) struct HTTPServerTests {
    @Test func keepAliveServesSeveralRequestsOnOneConnection() throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try server.client()
        for _ in 0..<5 {
            let response = try client.request("GET", "/healthz")
            #expect(response.status == 200 && response.text == "ok")
            #expect(response.header("Content-Length") == "2")
            #expect(response.header("Date")?.hasSuffix(" GMT") == true)
            #expect(response.header("Connection") == nil)
        }
        #expect(server.recorder.opened == 1)
    }

    @Test func pipelinedRequestsAreAnsweredInOrderWhenTheFirstAnswersLast() throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try server.client()
        try client.send(
            "GET /later/150 HTTP/1.1\r\nHost: t\r\n\r\nGET /later/0 HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
        )
        #expect(try client.readResponse().text == "later 150")
        #expect(try client.readResponse().text == "later 0")
        #expect(try client.readResponse().text == "ok")
    }

    @Test func manyPipelinedRequestsBeyondTheBufferBoundAreAllAnswered() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.limits.maxPipelinedRequests = 4
        let server = try TestServer(configuration: configuration)
        defer { server.stop() }
        let client = try server.client()
        try client.send(String(repeating: "GET /later/1 HTTP/1.1\r\nHost: t\r\n\r\n", count: 50))
        for _ in 0..<50 { #expect(try client.readResponse().text == "later 1") }
    }

    /// A client that pipelines requests and reads none of the answers: past the write
    /// bound the server stops reading it (its sends stop being taken), holds no more than
    /// the bound and the answers already being made, serves other connections as usual,
    /// and closes it once it has taken nothing for the idle timeout. The bounds are
    /// checked as they are, over the real sockets: what the kernels hold is read from
    /// /proc/net/tcp and taken off what was sent and answered.
    @Test func aClientThatReadsNoAnswersStopsBeingReadThenIsClosedWhileOthersAreServed() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0, idleTimeout: .seconds(2))
        configuration.limits.maxUnsentBytes = 64 << 10
        let server = try TestServer(configuration: configuration)
        defer { server.stop() }
        let flooder = try HTTPTestClient(port: server.port, receiveBufferBytes: 4096)
        // Requests of 37 bytes, each answered with 1 KiB (small, so that the answers in
        // flight past the bound are few beside it). The first 64 KiB go in one write, so
        // that the server's first read holds 1,770 of them: 1.8 MB of answers.
        let request = "GET /bytes/1024 HTTP/1.1\r\nHost: t\r\n\r\n"
        let requests = Array(String(repeating: request, count: 100).utf8)
        let first = String(repeating: request, count: (64 << 10) / request.utf8.count)
        try flooder.send(first)
        let flood = flooder.floodUntilRefused(requests)
        let accepted = first.utf8.count + flood.taken
        try #require(!flood.closed && flood.refused, "the server went on reading, or closed the flooder early")
        let records = server.recorder.records
        let answer = try #require(records.first?.responseBytes)
        let flooderPort = try #require(records.first?.remoteAddress?.port)
        let queues = try #require(
            try KernelSocketQueues.of([(flooderPort, server.port), (server.port, flooderPort)]), "not in /proc/net/tcp")
        let (atFlooder, atServer) = (queues[0], queues[1])
        // Read by the server: what the flooder sent less what the kernels still hold. Beyond
        // the requests it answered, the server holds at most one read (64 KiB) undecoded.
        let read = accepted - atFlooder.unacknowledged - atServer.unread
        let undecoded = read - records.count * request.utf8.count
        #expect(undecoded >= 0 && undecoded <= 64 << 10, "\(undecoded) bytes read and not answered")
        // Held by the server: what it answered less what the kernels took. It stopped
        // reading once that passed the bound, and what it had dispatched by then (16
        // pipelined requests at most, and the one being written) still went out; the
        // kernel may take some of it later, but at a quarter of the bound or less the
        // server reads again, and requests wait for it in its socket.
        let answered = records.reduce(0) { $0 + $1.responseBytes }
        let inKernels = atServer.unacknowledged + atFlooder.unread
        let held = answered - inKernels
        let bound = configuration.limits.maxUnsentBytes
        let inFlight = (configuration.limits.maxPipelinedRequests + 1) * answer
        #expect(atServer.unread > 0, "no request waited to be read")
        #expect(held > bound / 4, "not reading at \(held) bytes held, a quarter of the bound (\(bound)) or less")
        #expect(held <= bound + inFlight, "\(held) bytes held, over the bound and \(inFlight) in flight")

        let other = try server.client()
        #expect(try other.request("GET", "/healthz").text == "ok")

        // The flooder takes nothing: the server closes it (a reset, since its requests are
        // unread) once the idle timeout passes; 15 s at most here.
        let closed = eventuallyHoldsBlocking(seconds: 15) { (try? flooder.sendWithoutWaiting(requests)) == nil }
        #expect(closed, "the server still holds a connection whose client took nothing")
    }

    @Test func aHandlerMayAnswerLaterFromATimer() throws {
        let server = try TestServer()
        defer { server.stop() }
        let started = ContinuousClock.now
        let response = try server.client().request("GET", "/later/100")
        #expect(response.text == "later 100")
        #expect(ContinuousClock.now - started >= .milliseconds(90))
    }

    @Test func bodiesArriveWholeIncludingChunked() throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try server.client()
        let big = (0..<200_000).map { UInt8(truncatingIfNeeded: $0) }
        #expect(try client.request("POST", "/echo", body: big).body == big)
        try client.send("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        #expect(try client.readResponse().text == "abcde")
    }

    @Test func pathParametersReachTheHandler() throws {
        let server = try TestServer()
        defer { server.stop() }
        let response = try server.client().request("POST", "/v1/locks/active_game/current/claim")
        let object = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: String]
        #expect(object == ["table": "active_game", "key": "current"])
        #expect(response.header("Content-Type") == "application/json")
    }

    @Test func wrongMethodIs405WithAllow() throws {
        let server = try TestServer()
        defer { server.stop() }
        let response = try server.client().request("DELETE", "/healthz")
        #expect(response.status == 405)
        #expect(response.header("Allow") == "GET, HEAD")
        #expect(response.text.contains(#""code":"method_not_allowed""#))
    }

    @Test func unknownPathIs404Json() throws {
        let server = try TestServer()
        defer { server.stop() }
        let response = try server.client().request("GET", "/nowhere")
        #expect(response.status == 404)
        #expect(response.header("Content-Type") == "application/json")
        let object = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: [String: Any]]
        #expect(object?["error"]?["code"] as? String == "not_found")
        #expect(object?["error"]?["retryable"] as? Bool == false)
    }

    @Test func headGetsGetHeadersAndNoBody() throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try server.client()
        let head = try client.request("HEAD", "/healthz")
        #expect(head.status == 200 && head.header("Content-Length") == "2" && head.body.isEmpty)
        // Had a body been sent, it would be read here as the start of the next response.
        #expect(try client.request("GET", "/healthz").text == "ok")
    }

    @Test func slowHeadersAreClosedByTheHeadTimeout() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.headTimeout = .milliseconds(200)
        let server = try TestServer(configuration: configuration)
        defer { server.stop() }
        let client = try server.client(timeout: 3)
        let started = ContinuousClock.now
        try client.send("GET /healthz HTTP/1.1\r\nHost:")
        // Closed within the client's three seconds, and not before the timeout was due.
        #expect(client.waitForClose())
        #expect(ContinuousClock.now - started >= .milliseconds(150))
        #expect(client.unreadBytes.isEmpty, "closed without a response")
    }

    @Test func aSilentConnectionIsClosedByTheHeadTimeout() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.headTimeout = .milliseconds(150)
        let server = try TestServer(configuration: configuration)
        defer { server.stop() }
        #expect(try server.client(timeout: 3).waitForClose())
    }

    @Test func idleKeepAliveConnectionsAreClosedByTheIdleTimeout() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.idleTimeout = .milliseconds(200)
        let server = try TestServer(configuration: configuration)
        defer { server.stop() }
        let client = try server.client(timeout: 3)
        #expect(try client.request("GET", "/healthz").status == 200)
        let started = ContinuousClock.now
        #expect(client.waitForClose())
        #expect(ContinuousClock.now - started >= .milliseconds(150))
    }

    @Test func malformedRequestGets400AndTheConnectionCloses() throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try server.client()
        try client.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\nNONSENSE\r\n\r\n")
        #expect(try client.readResponse().status == 200)
        let refusal = try client.readResponse()
        #expect(refusal.status == 400 && refusal.header("Connection") == "close")
        #expect(refusal.text.contains(#""code":"invalid_request""#))
        #expect(client.waitForClose())
    }

    @Test func oversizedRequestsGetTheirLimitStatus() throws {
        let server = try TestServer()
        defer { server.stop() }
        let cases: [(String, Int, String)] = [
            ("POST /echo HTTP/1.1\r\nContent-Length: 1048577\r\n\r\n", 413, "payload_too_large"),
            ("GET /\(String(repeating: "a", count: 8200)) HTTP/1.1\r\n\r\n", 414, "uri_too_long"),
            ("GET / HTTP/1.1\r\nX: \(String(repeating: "b", count: 16400))\r\n\r\n", 431, "headers_too_large"),
        ]
        for (request, status, code) in cases {
            let client = try server.client()
            try client.send(request)
            let response = try client.readResponse()
            #expect(response.status == status && response.text.contains(code))
            #expect(client.waitForClose())
        }
    }

    @Test func a413ReachesAClientStillSendingItsBody() throws {
        // The server refuses on Content-Length and closes while the body streams in; closing
        // with unread bytes would reset the connection and destroy the 413 before it is read.
        let server = try TestServer()
        defer { server.stop() }
        let client = try server.client()
        try client.send("POST /echo HTTP/1.1\r\nContent-Length: 4194304\r\n\r\n")
        let chunk = [UInt8](repeating: 0x61, count: 64 * 1024)
        for _ in 0..<48 { try client.send(chunk) }
        let response = try client.readResponse()
        #expect(response.status == 413)
        #expect(response.text.contains("payload_too_large"))
    }

    @Test func connectionCloseRequestIsAnsweredThenClosed() throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try server.client()
        let response = try client.request("GET", "/healthz", headers: [("Connection", "close")])
        #expect(response.header("Connection") == "close")
        #expect(client.waitForClose())
    }

    @Test func answeringAfterTheClientLeftIsHarmless() throws {
        let server = try TestServer()
        defer { server.stop() }
        let leaving = try server.client()
        try leaving.send("GET /held HTTP/1.1\r\nHost: t\r\n\r\n")
        try server.waitForHeld()
        leaving.close()
        // Answered only now, to a client that has gone; the connection is still released.
        server.recorder.release()
        try eventuallyBlocking("the left connection released", seconds: 10) { server.recorder.closed == 1 }
        #expect(try server.client().request("GET", "/healthz").text == "ok")
    }

    @Test func observerSeesRoutesStatusesAndConnections() throws {
        let server = try TestServer()
        let client = try server.client()
        _ = try client.request("POST", "/v1/locks/t/k/claim")
        _ = try client.request("GET", "/missing")
        client.close()
        server.stop()
        let records = server.recorder.records
        #expect(records.map(\.route) == ["/v1/locks/:table/:key/claim", nil])
        #expect(records.map(\.status.code) == [200, 404])
        #expect(records.map(\.method) == [.post, .get])
        #expect(
            records.allSatisfy { $0.responseBytes > 0 && $0.remoteAddress?.description.hasPrefix("127.0.0.1:") == true }
        )
        #expect(server.recorder.opened == 1 && server.recorder.closed == 1)
    }

    @Test func requestsCarryThePeerAddress() throws {
        let server = try TestServer()
        defer { server.stop() }
        #expect(try server.client().request("GET", "/peer").text.hasPrefix("127.0.0.1:"))
    }

    @Test func aTrustedProxysPROXYHeaderNamesTheClientOfRequestsAndLogs() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.trustedProxies = try TrustedProxies(parsing: "127.0.0.2")
        let server = try TestServer(configuration: configuration)
        defer { server.stop() }
        let proxy = try HTTPTestClient(port: server.port, source: "127.0.0.2")
        try proxy.send(
            ProxyHeaders.v2(source: "2001:db8::9", sourcePort: 4242, destination: "::1", destinationPort: 80))
        let first = try proxy.request("GET", "/peer")
        #expect(first.status == 200 && first.text == "[2001:db8::9]:4242", "\(first.status) \(first.text)")
        #expect(try proxy.request("GET", "/peer").text == "[2001:db8::9]:4242")
        try eventuallyBlocking("both answers recorded", seconds: 5) { server.recorder.records.count == 2 }
        #expect(server.recorder.records.allSatisfy { $0.remoteAddress?.description == "[2001:db8::9]:4242" })
        // Without a header, the trusted proxy speaks for itself; anyone else is served as itself.
        let bare = try HTTPTestClient(port: server.port, source: "127.0.0.2")
        let itself = try bare.request("GET", "/peer")
        #expect(itself.status == 200 && itself.text.hasPrefix("127.0.0.2:"), "\(itself.status) \(itself.text)")
        #expect(try server.client().request("GET", "/peer").text.hasPrefix("127.0.0.1:"))
    }

    @Test func xForwardedForIsReadFromATrustedProxyOnly() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.trustedProxies = try TrustedProxies(parsing: "127.0.0.2")
        let server = try TestServer(configuration: configuration)
        defer { server.stop() }
        let forwarded = [("X-Forwarded-For", "198.51.100.66, 192.0.2.1")]
        // A LOCAL header: the proxy speaks for itself, and for whom it forwards.
        let proxy = try HTTPTestClient(port: server.port, source: "127.0.0.2")
        try proxy.send(ProxyHeaders.v2(command: 0x20, family: 0, payload: []))
        #expect(try proxy.request("GET", "/peer", headers: forwarded).text == "192.0.2.1")
        #expect(try proxy.request("GET", "/peer").text.hasPrefix("127.0.0.2:"))
        // No header at all (a gateway forwarding a sign-in): the same, even when the first
        // bytes, sent alone, could begin a v2 header.
        let forwarder = try HTTPTestClient(port: server.port, source: "127.0.0.2")
        try forwarder.send(Array("\r\n".utf8))
        #expect(try forwarder.request("GET", "/peer", headers: forwarded).text == "192.0.2.1")
        // A client the header named is not a proxy: its own X-Forwarded-For is not read.
        let relayed = try HTTPTestClient(port: server.port, source: "127.0.0.2")
        try relayed.send(
            ProxyHeaders.v1(source: "203.0.113.9", sourcePort: 7, destination: "127.0.0.1", destinationPort: 80))
        #expect(try relayed.request("GET", "/peer", headers: forwarded).text == "203.0.113.9:7")
        let stranger = try server.client()
        #expect(try stranger.request("GET", "/peer", headers: forwarded).text.hasPrefix("127.0.0.1:"))
    }

    @Test func anUntrustedPeersPROXYHeaderIsBadHTTP() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.trustedProxies = try TrustedProxies(parsing: "127.0.0.2")
        let server = try TestServer(configuration: configuration)
        defer { server.stop() }
        let spoofer = try server.client()
        try spoofer.send(
            ProxyHeaders.v1(source: "192.0.2.1", sourcePort: 1, destination: "127.0.0.1", destinationPort: 80))
        let answer = try spoofer.request("GET", "/peer")
        #expect(answer.status == 400)
        #expect(spoofer.waitForClose())
    }

    @Test func everyLoopOfTheGroupServesOnTheSamePort() throws {
        let server = try TestServer(loops: 2)
        defer { server.stop() }
        let clients = try (0..<8).map { _ in try server.client() }
        for client in clients { #expect(try client.request("GET", "/healthz").text == "ok") }
    }

    @Test func anAddressAnotherServerServesIsRefused() throws {
        let first = try TestServer(loops: 2)
        defer { first.stop() }
        let error = #expect(throws: LoopError.self) {
            try TestServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: first.port))
        }
        #expect(error?.code == -EADDRINUSE)
        #expect(error?.description.contains("127.0.0.1:\(first.port)") == true)
        #expect(try first.client().request("GET", "/healthz").text == "ok")
    }

    @Test func serversThatSharePortServeOneAddressTogether() throws {
        let first = try TestServer(loops: 2)
        defer { first.stop() }
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: first.port)
        configuration.sharesPort = true
        let second = try TestServer(configuration: configuration)
        defer { second.stop() }
        #expect(second.port == first.port)
        for _ in 0..<8 { #expect(try first.client().request("GET", "/healthz").text == "ok") }
    }

    /// What a server finds when another process joined its address between its check
    /// and its listeners (both with `SO_REUSEPORT`): one socket that is not its own.
    @Test func aListenerOfAnotherOwnerOnTheAddressIsCounted() throws {
        let loop = EventLoop.spawn(name: "bind")
        defer { loop.stop() }
        let opened = loop.runAndWait { () -> Result<(LoopBound<TCPListener>, SocketAddress, UInt64), LoopError> in
            do throws(LoopError) {
                let listener = try TCPListener(loop: loop, address: SocketAddress(host: "127.0.0.1", port: 0)) { _ in }
                return .success((LoopBound(listener, loop: loop), listener.address, listener.inode))
            } catch {
                return .failure(error)
            }
        }
        let (listener, address, inode) = try opened.get()
        defer { loop.runAndWait { listener.value.close() } }
        #expect(TCPListener.otherListeners(on: address, excluding: [inode]) == 0)
        let other = try LoopbackSocket(listening: true, port: address.port, reusePort: true)
        #expect(TCPListener.otherListeners(on: address, excluding: [inode]) == 1)
        withExtendedLifetime(other) {}
    }

    @Test func aHandlerCanTakeTheConnectionOverWithTheBytesAfterTheUpgrade() throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try server.client()
        try client.send("GET /v1/stream HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nfirst")
        let switched = try client.readResponse()
        #expect(switched.status == 101)
        #expect(try client.readBytes(5) == Array("first".utf8))
        try client.send("second")
        #expect(try client.readBytes(6) == Array("second".utf8))
        // The HTTP side let go of it: the observer saw it leave.
        #expect(server.recorder.closed == 1)
    }

    /// A stream answers what its client sends (a WebSocket ping with a pong): past the
    /// same bound as HTTP, the connection stops reading it.
    @Test func aTakenOverConnectionStopsReadingPastTheSameBound() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.limits.maxUnsentBytes = 64 << 10
        let server = try TestServer(configuration: configuration)
        defer { server.stop() }
        let client = try HTTPTestClient(port: server.port, receiveBufferBytes: 4096)
        try client.send("GET /v1/stream HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
        #expect(try client.readResponse().status == 101)
        let chunk = [UInt8](repeating: UInt8(ascii: "e"), count: 16 << 10)
        var refusedInARow = 0
        for _ in 0..<4000 where refusedInARow < 25 {
            let taken = try client.sendWithoutWaiting(chunk)
            refusedInARow = taken == 0 ? refusedInARow + 1 : 0
            if taken == 0 { Thread.sleep(forTimeInterval: 0.02) }
        }
        #expect(refusedInARow == 25, "the server went on reading")
        // The bound and one read (64 KiB) past it.
        #expect(server.recorder.mostUnsentTakenOver <= 128 << 10)
        #expect(server.recorder.mostUnsentTakenOver > 0, "the echo never had to queue")
    }

    @Test func takeOverIsRefusedWhileAnotherRequestIsInFlight() throws {
        let server = try TestServer()
        defer { server.stop() }
        let client = try server.client()
        try client.send("GET /later/100 HTTP/1.1\r\nHost: t\r\n\r\nGET /v1/stream HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(try client.readResponse().status == 200)
        let refused = try client.readResponse()
        #expect(refused.status == 400 && refused.text.contains("invalid_request"))
    }

    // MARK: - Shutdown

    @Test func shuttingDownTwiceCompletesBoth() throws {
        let server = try TestServer()
        let client = try server.client()
        try client.send("GET /held HTTP/1.1\r\nHost: t\r\n\r\n")
        try server.waitForHeld()
        let done = DispatchSemaphore(value: 0)
        server.server.shutdown(deadline: .now + .seconds(10)) { done.signal() }
        server.server.shutdown(deadline: .now + .seconds(10)) { done.signal() }
        // Neither completes while the request is in flight; both do once it is answered.
        // The loop has run both shutdowns once a block queued after them ran, and the
        // listener is closed: a completion due then would have been called already.
        server.group.loops[0].runAndWait {}
        #expect(throws: HTTPTestClientError.refused(port: server.port)) { try HTTPTestClient(port: server.port) }
        #expect(done.wait(timeout: .now()) == .timedOut)
        server.recorder.release()
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(try client.readResponse().text == "released")
        server.group.stop()
    }

    @Test func gracefulShutdownLetsARequestInFlightFinish() throws {
        let server = try TestServer()
        let idle = try server.client()
        #expect(try idle.request("GET", "/healthz").status == 200)
        let busy = try server.client()
        try busy.send("GET /held HTTP/1.1\r\nHost: t\r\n\r\n")
        try server.waitForHeld()
        let finished = Atomic<Bool>(false)
        let done = DispatchSemaphore(value: 0)
        server.server.shutdown(deadline: .now + .seconds(5)) {
            finished.store(true, ordering: .sequentiallyConsistent)
            done.signal()
        }
        // The idle keep-alive connection closes at once; the busy one gets its answer first.
        #expect(idle.waitForClose())
        let finishedEarly = finished.load(ordering: .sequentiallyConsistent)
        #expect(!finishedEarly)
        server.recorder.release()
        let response = try busy.readResponse()
        #expect(response.text == "released" && response.header("Connection") == "close")
        #expect(busy.waitForClose())
        #expect(done.wait(timeout: .now() + 5) == .success)
        // No longer accepting.
        #expect(throws: HTTPTestClientError.refused(port: server.port)) { try HTTPTestClient(port: server.port) }
        server.group.stop()
    }

    @Test func shutdownForceClosesWhatOutlivesTheDeadline() throws {
        let server = try TestServer()
        let busy = try server.client()
        try busy.send("GET /held HTTP/1.1\r\nHost: t\r\n\r\n")
        try server.waitForHeld()
        let started = ContinuousClock.now
        let done = DispatchSemaphore(value: 0)
        server.server.shutdown(deadline: .now + .milliseconds(200)) { done.signal() }
        #expect(done.wait(timeout: .now() + 3) == .success)
        #expect(ContinuousClock.now - started < .seconds(2))
        // Closed without its answer, which was never made.
        #expect(busy.waitForClose())
        #expect(busy.unreadBytes.isEmpty && server.recorder.records.isEmpty, "\(server.recorder.records)")
        server.recorder.release()
        server.group.stop()
    }
}
