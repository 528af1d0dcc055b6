import FerryTestSupport
import Foundation
import Testing

@testable import FerryClient

/// ``CueStream`` over real sockets: against an in-process gateway on a migrated database
/// (PROTOCOL.md's "Streams"), and against a loopback server that goes silent.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct CueStreamTests {
    /// Starts `stream`, runs `body` with its event log, stops it whatever happens.
    func running<T>(_ stream: CueStream, _ body: (StreamEventLog) async throws -> T) async throws -> T {
        let log = await StreamEventLog.reading(stream)
        await stream.start()
        do {
            let value = try await body(log)
            await stream.stop()
            await log.close()
            return value
        } catch {
            await stream.stop()
            await log.close()
            throw error
        }
    }

    @Test func openedIsReportedAndAnotherDevicesPushCuesItsTablesAndOrigin() async throws {
        try await StreamTestGateway.with { gateway in
            let phone = try await gateway.signUp()
            let tablet = try await gateway.anotherDevice(of: phone)
            let stream = await StreamTestTokens(gateway, phone).stream()
            try await running(stream) { log in
                try await log.waitFor(.opened)
                try await gateway.pushTask(tablet, id: "from-the-tablet")
                try await log.waitFor(.cue(tables: ["tasks"], origin: tablet.deviceID))
                // A cue from the phone's own push carries the phone's id: the client skips it.
                try await gateway.pushTask(phone, id: "from-the-phone")
                try await log.waitFor(.cue(tables: ["tasks"], origin: phone.deviceID))
                #expect(await log.count(.opened) == 1)
            }
        }
    }

    @Test func aGatewayRestartIsFollowedByAReconnectAndAnotherOpened() async throws {
        try await StreamTestGateway.with { gateway in
            let phone = try await gateway.signUp()
            let tablet = try await gateway.anotherDevice(of: phone)
            let stream = await StreamTestTokens(gateway, phone).stream()
            try await running(stream) { log in
                try await log.waitFor(.opened)
                await gateway.stop()
                try await log.waitFor(.disconnected(reason: "closed 1001 going_away"))
                try await gateway.start()
                try await log.waitFor(.opened, count: 2)
                // The new connection is live: a change reaches it.
                try await gateway.pushTask(tablet, id: "after-the-restart")
                try await log.waitFor(.cue(tables: ["tasks"], origin: tablet.deviceID))
            }
        }
    }

    /// A stream opened with a token that ends within the gateway's warning window (here
    /// ten minutes, so a slow open on a loaded machine cannot outlast the token) is warned
    /// at once. It opens a second connection with a refreshed token (an hour's, outside
    /// the window) and drops the first once that one said hello: no disconnect, the
    /// gateway holds one stream, and the stream still carries cues.
    @Test func aShortLivedTokenIsRenewedWithAFreshOneWithoutAGap() async throws {
        try await StreamTestGateway.with(arguments: ["--token-leeway", "0", "--stream-token-warning", "600"]) {
            gateway in
            let phone = try await gateway.signUp()
            let tablet = try await gateway.anotherDevice(of: phone)
            let tokens = StreamTestTokens(gateway, phone, first: try gateway.token(for: phone, endingIn: 300))
            let stream = await tokens.stream()
            try await running(stream) { log in
                try await log.waitFor(.opened, count: 2)
                #expect(await tokens.refreshes == 1)
                try await eventually("the first connection is gone") { try await gateway.streamsOpen() == 1 }
                try await gateway.pushTask(tablet, id: "after-the-renewal")
                try await log.waitFor(.cue(tables: ["tasks"], origin: tablet.deviceID))
                let events = await log.events
                #expect(!events.contains { if case .disconnected = $0 { true } else { false } }, "\(events)")
                #expect(await log.count(.opened) == 2)
                #expect(await tokens.refreshes == 1, "the fresh token is outside the warning window")
            }
        }
    }

    @Test func signingOutClosesTheStream4003AndItStaysDown() async throws {
        try await StreamTestGateway.with { gateway in
            let phone = try await gateway.signUp()
            let stream = await StreamTestTokens(gateway, phone).stream()
            try await running(stream) { log in
                try await log.waitFor(.opened)
                let signedOut = try await call("POST", "/v1/auth/signout", port: gateway.port, token: phone.accessToken)
                #expect(signedOut.status == 204)
                try await log.waitFor(.sessionEnded(code: 4003))
                try await eventually("the gateway holds no stream") { try await gateway.streamsOpen() == 0 }
                #expect(await stream.tasksAlive == 1, "only the input runner waits for a start or stop")
                #expect(await log.count(.opened) == 1)
            }
        }
    }

    @Test func deletingTheAccountClosesTheStream4004() async throws {
        try await StreamTestGateway.with { gateway in
            let phone = try await gateway.signUp()
            let stream = await StreamTestTokens(gateway, phone).stream()
            try await running(stream) { log in
                try await log.waitFor(.opened)
                let deleted = try await call(
                    "DELETE", "/v1/account", port: gateway.port, token: phone.accessToken, json: ["confirm": "DELETE"])
                #expect(deleted.status == 204)
                try await log.waitFor(.sessionEnded(code: 4004))
            }
        }
    }

    /// A server that sends `hello` (a 200 ms heartbeat) and then nothing, not even pings:
    /// after two heartbeats of silence the stream gives the connection up and opens another.
    @Test func aServerThatFallsSilentAfterHelloIsDetectedAndReconnected() async throws {
        let server = try SilentServer(
            greeting: "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\r\n"
                + "retry: 3000\n\nevent: hello\ndata: {\"type\":\"hello\",\"user_id\":\"u\",\"device_id\":\"d\","
                + "\"heartbeat_ms\":200}\n\n")
        let stream = CueStream(
            configuration: CueStream.Configuration(
                serverURL: URL(string: "http://127.0.0.1:\(server.port)")!, transport: .serverSentEvents,
                backoffCap: .seconds(1)),
            accessToken: { _ in "token" })
        try await running(stream) { log in
            try await log.waitFor(.opened, count: 2)
            let events = await log.events
            #expect(events.contains(.disconnected(reason: "silent for 0.4 seconds")), "\(events)")
            #expect(server.accepted >= 2)
            // The token travels in the Authorization header, never in the URL.
            let request = try #require(server.requests.first).lowercased()
            #expect(request.hasPrefix("get /v1/events http/1.1\r\n"), "\(request)")
            #expect(request.contains("\r\nauthorization: bearer token\r\n"), "\(request)")
            #expect(!request.contains("access_token"), "\(request)")
        }
        await server.close()
    }

    /// A server that accepts the connection and never answers: no `hello` within the
    /// open timeout, so the stream gives up and tries again, with backoff.
    @Test func aServerThatNeverAnswersIsGivenUpAfterTheOpenTimeoutAndRetried() async throws {
        let server = try SilentServer()
        let stream = CueStream(
            configuration: CueStream.Configuration(
                serverURL: URL(string: "http://127.0.0.1:\(server.port)")!, transport: .serverSentEvents,
                backoffCap: .seconds(1), openTimeout: .milliseconds(500)),
            accessToken: { _ in "token" })
        try await running(stream) { log in
            try await log.waitFor(.disconnected(reason: "no hello within 0.5 seconds"), count: 2)
            #expect(server.accepted >= 2)
            #expect(await log.count(.opened) == 0)
        }
        await server.close()
    }

    /// After stop() returns the stream has no task and no connection left, the gateway
    /// holds no stream of it, and a change it would have been cued for reports nothing
    /// (a second stream of the same user, cued by it, is the witness).
    @Test func stopLeavesNoTaskNorConnectionBehindAndNoEventAfterIt() async throws {
        try await StreamTestGateway.with { gateway in
            let phone = try await gateway.signUp()
            let tablet = try await gateway.anotherDevice(of: phone)
            let stream = await StreamTestTokens(gateway, phone).stream()
            let log = await StreamEventLog.reading(stream)
            await stream.start()
            try await log.waitFor(.opened)
            await stream.stop()
            #expect(await stream.tasksAlive == 0)
            try await eventually("the stream's connections are gone") { await stream.connectionsAlive == 0 }
            try await eventually("the gateway holds no stream") { try await gateway.streamsOpen() == 0 }
            let seen = await log.events

            let witness = await StreamTestTokens(gateway, phone).stream()
            try await running(witness) { witnessLog in
                try await witnessLog.waitFor(.opened)
                try await gateway.pushTask(tablet, id: "while-stopped")
                try await witnessLog.waitFor(.cue(tables: ["tasks"], origin: tablet.deviceID))
            }
            #expect(await log.events == seen)
            await log.close()
        }
    }

    /// stop() while the stream waits for its token cancels that request and waits for it.
    @Test func stopWhileATokenIsAwaitedCancelsTheRequestAndWaitsForIt() async throws {
        let asked = LockedValue(0)
        let stream = CueStream(
            configuration: CueStream.Configuration(serverURL: URL(string: "http://127.0.0.1:1")!),
            accessToken: { _ in
                asked.withLock { $0 += 1 }
                try await Task.sleep(for: .seconds(3600))
                return "never"
            })
        await stream.start()
        try await eventually("the token was asked for") { asked.withLock { $0 } == 1 }
        #expect(await stream.tasksAlive == 3, "the runner, the open timeout's timer, the token request")
        await stream.stop()
        #expect(await stream.tasksAlive == 0)
        #expect(await stream.connectionsAlive == 0)
    }

    /// stop() while the stream is still waiting for a server's hello (and during its
    /// backoff) leaves nothing behind either.
    @Test func stopWhileConnectingLeavesNothingBehind() async throws {
        let server = try SilentServer()
        let stream = CueStream(
            configuration: CueStream.Configuration(
                serverURL: URL(string: "http://127.0.0.1:\(server.port)")!, transport: .serverSentEvents),
            accessToken: { _ in "token" })
        await stream.start()
        try await eventually("the server was asked") { server.accepted >= 1 }
        await stream.stop()
        #expect(await stream.tasksAlive == 0)
        try await eventually("the stream's connections are gone") { await stream.connectionsAlive == 0 }
        await server.close()
    }
}
