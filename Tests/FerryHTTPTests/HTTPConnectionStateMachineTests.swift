import FerryTestSupport
import Testing

@testable import FerryHTTP

/// A flattened action, comparable in `#expect`.
private enum Step: Equatable {
    case dispatch(path: String, sequence: UInt64)
    case write(status: Int, sequence: UInt64, closes: Bool)
    case writeContinue, acknowledge, pauseReading, resumeReading, closeAfterWrites, close
}

private let second: UInt64 = 1_000_000_000

private struct Harness {
    var machine: HTTPConnectionStateMachine
    var now: UInt64 = 0
    /// Bytes the owner holds for writing, as a real one reports them.
    var queued = 0
    /// What each written answer adds to ``queued``.
    var answerBytes = 0

    init(limits: HTTPLimits = HTTPLimits(), head: UInt64 = 10 * second, idle: UInt64 = 60 * second) {
        machine = HTTPConnectionStateMachine(limits: limits, timeouts: .init(head: head, idle: idle), now: 0)
    }

    /// Runs the machine until it waits, recording what it asked for.
    mutating func drain() -> [Step] {
        var steps: [Step] = []
        for _ in 0..<1000 {
            switch machine.nextAction() {
            case .dispatch(let request, let sequence): steps.append(.dispatch(path: request.path, sequence: sequence))
            case .write(let response, let context):
                steps.append(
                    .write(status: response.status.code, sequence: context.sequence, closes: context.closesConnection))
                queued += answerBytes
                machine.queuedForWriting(queued, now: now)
            case .writeContinue: steps.append(.writeContinue)
            case .acknowledgeReceived: steps.append(.acknowledge)
            case .pauseReading: steps.append(.pauseReading)
            case .resumeReading: steps.append(.resumeReading)
            case .closeAfterWrites: steps.append(.closeAfterWrites)
            case .close: steps.append(.close)
            case .wait: return steps
            }
        }
        Issue.record("the machine never settled")
        return steps
    }

    mutating func read(_ text: String) -> [Step] {
        Array(text.utf8).withUnsafeBytes { machine.read($0, now: now) }
        return drain()
    }

    /// The client took bytes: `left` are still waiting.
    mutating func drained(to left: Int) -> [Step] {
        queued = left
        machine.queuedForWriting(left, now: now)
        return drain()
    }

    mutating func respond(_ sequence: UInt64, status: HTTPStatus = .ok) -> [Step] {
        machine.respond(sequence: sequence, response: HTTPResponse(status: status), route: "/r", now: now)
        return drain()
    }
}

private func get(_ path: String, close: Bool = false) -> String {
    "GET \(path) HTTP/1.1\r\nHost: t\r\n\(close ? "Connection: close\r\n" : "")\r\n"
}

@Suite(.tagSelection) struct HTTPConnectionStateMachineTests {
    @Test func dispatchesARequestAndWritesItsAnswer() {
        var harness = Harness()
        #expect(harness.read(get("/a")) == [.dispatch(path: "/a", sequence: 0)])
        #expect(harness.respond(0) == [.write(status: 200, sequence: 0, closes: false)])
        #expect(harness.machine.requestsInFlight == 0)
    }

    @Test func pipelinedAnswersGoOutInRequestOrderWhenTheSecondIsReadyFirst() {
        var harness = Harness()
        #expect(
            harness.read(get("/a") + get("/b") + get("/c")) == [
                .dispatch(path: "/a", sequence: 0), .dispatch(path: "/b", sequence: 1),
                .dispatch(path: "/c", sequence: 2),
            ])
        #expect(harness.respond(1).isEmpty)
        #expect(harness.respond(2).isEmpty)
        #expect(
            harness.respond(0) == [
                .write(status: 200, sequence: 0, closes: false), .write(status: 200, sequence: 1, closes: false),
                .write(status: 200, sequence: 2, closes: false),
            ])
    }

    @Test func readingPausesWhenThePipelineIsFullAndResumesAsAnswersLeave() {
        var harness = Harness(limits: HTTPLimits(maxPipelinedRequests: 2))
        let steps = harness.read(get("/a") + get("/b") + get("/c") + get("/d"))
        #expect(steps == [.dispatch(path: "/a", sequence: 0), .dispatch(path: "/b", sequence: 1), .pauseReading])
        #expect(
            harness.respond(0) == [.write(status: 200, sequence: 0, closes: false), .dispatch(path: "/c", sequence: 2)])
        #expect(
            harness.respond(1) == [.write(status: 200, sequence: 1, closes: false), .dispatch(path: "/d", sequence: 3)])
        #expect(harness.respond(2) == [.write(status: 200, sequence: 2, closes: false), .resumeReading])
        #expect(harness.respond(3) == [.write(status: 200, sequence: 3, closes: false)])
    }

    @Test func bytesArrivingWhileFullAreKeptAndDecodedLater() {
        var harness = Harness(limits: HTTPLimits(maxPipelinedRequests: 1))
        #expect(harness.read(get("/a") + "GET /b HT") == [.dispatch(path: "/a", sequence: 0), .pauseReading])
        #expect(harness.read("TP/1.1\r\n\r\n").isEmpty)
        #expect(
            harness.respond(0) == [.write(status: 200, sequence: 0, closes: false), .dispatch(path: "/b", sequence: 1)])
        #expect(harness.respond(1) == [.write(status: 200, sequence: 1, closes: false), .resumeReading])
    }

    @Test func connectionCloseRequestIsAnsweredThenClosesAndLaterBytesAreIgnored() {
        var harness = Harness()
        #expect(
            harness.read(get("/a", close: true) + get("/b")) == [.dispatch(path: "/a", sequence: 0), .pauseReading])
        #expect(harness.respond(0) == [.write(status: 200, sequence: 0, closes: true), .closeAfterWrites])
    }

    @Test func malformedRequestAfterGoodOnesIsAnsweredInOrderWith400ThenCloses() {
        var harness = Harness()
        #expect(harness.read(get("/a") + "BROKEN\r\n\r\n") == [.dispatch(path: "/a", sequence: 0), .pauseReading])
        #expect(
            harness.respond(0) == [
                .write(status: 200, sequence: 0, closes: false), .write(status: 400, sequence: 1, closes: true),
                .closeAfterWrites,
            ])
    }

    /// Requests the server refuses, by what is wrong with them (short names keep test output readable).
    enum Refusal: String, CaseIterable {
        case bodyTooLarge, urlTooLong, headersTooLarge, badHeaderName

        var text: String {
            switch self {
            case .bodyTooLarge: "POST / HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n"
            case .urlTooLong: "GET /\(String(repeating: "u", count: 9000)) HTTP/1.1\r\n\r\n"
            case .headersTooLarge: "GET / HTTP/1.1\r\nX: \(String(repeating: "h", count: 17000))\r\n\r\n"
            case .badHeaderName: "GET / HTTP/1.1\r\nBad\u{1}: x\r\n\r\n"
            }
        }

        var status: Int {
            switch self {
            case .bodyTooLarge: 413
            case .urlTooLong: 414
            case .headersTooLarge: 431
            case .badHeaderName: 400
            }
        }
    }

    @Test(arguments: Refusal.allCases)
    func refusedRequestsGetTheirStatusThenClose(refusal: Refusal) {
        var harness = Harness()
        #expect(
            harness.read(refusal.text) == [
                .write(status: refusal.status, sequence: 0, closes: true), .closeAfterWrites,
            ])
    }

    @Test func http10KeepAliveIsHonoured() {
        var harness = Harness()
        _ = harness.read("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        var context: HTTPConnectionStateMachine.ResponseContext?
        harness.machine.respond(sequence: 0, response: HTTPResponse(status: .ok), route: nil, now: 0)
        if case .write(_, let written) = harness.machine.nextAction() { context = written }
        #expect(context?.isHTTP10 == true && context?.closesConnection == false)
    }

    // MARK: - Answers the client does not read

    @Test func pastTheWriteBoundNothingIsReadOrDecodedUntilTheQueueDrainsToAQuarter() {
        var harness = Harness(limits: HTTPLimits(maxUnsentBytes: 1000))
        harness.answerBytes = 600
        #expect(
            harness.read(get("/a") + get("/b")) == [
                .dispatch(path: "/a", sequence: 0), .dispatch(path: "/b", sequence: 1),
            ])
        #expect(harness.respond(0) == [.write(status: 200, sequence: 0, closes: false)])
        #expect(harness.respond(1) == [.write(status: 200, sequence: 1, closes: false), .pauseReading])
        // A read already under way is kept, not decoded.
        #expect(harness.read(get("/c")).isEmpty)
        #expect(harness.drained(to: 251).isEmpty)
        #expect(harness.drained(to: 250) == [.dispatch(path: "/c", sequence: 2), .resumeReading])
    }

    /// The bug this bound fixes: one read held thousands of small pipelined requests, and
    /// every one was answered into memory although the client read nothing.
    @Test func pipelinedRequestsAlreadyReadAreNotAnsweredPastTheBound() {
        var harness = Harness(limits: HTTPLimits(maxPipelinedRequests: 2, maxUnsentBytes: 1000))
        harness.answerBytes = 400
        let pipelined = (0..<6).map { get("/\($0)") }.joined()
        #expect(
            harness.read(pipelined) == [
                .dispatch(path: "/0", sequence: 0), .dispatch(path: "/1", sequence: 1), .pauseReading,
            ])
        #expect(
            harness.respond(0) == [.write(status: 200, sequence: 0, closes: false), .dispatch(path: "/2", sequence: 2)])
        #expect(
            harness.respond(1) == [.write(status: 200, sequence: 1, closes: false), .dispatch(path: "/3", sequence: 3)])
        // 1,200 bytes queued: /4 and /5 wait in the stash although the pipeline has room.
        #expect(harness.respond(2) == [.write(status: 200, sequence: 2, closes: false)])
        #expect(harness.respond(3) == [.write(status: 200, sequence: 3, closes: false)])
        #expect(harness.machine.requestsInFlight == 0)
        // The pipeline is full again: reading resumes as those two are answered.
        #expect(harness.drained(to: 0) == [.dispatch(path: "/4", sequence: 4), .dispatch(path: "/5", sequence: 5)])
    }

    @Test func aClientThatTakesNothingPastTheBoundIsClosedAfterTheIdleTimeout() {
        var harness = Harness(limits: HTTPLimits(maxUnsentBytes: 1000), head: 5 * second, idle: 20 * second)
        harness.answerBytes = 2000
        _ = harness.read(get("/a") + get("/b"))
        harness.now = 1 * second
        _ = harness.respond(0)
        // /b is still in flight: before the bound, that meant no deadline at all.
        #expect(harness.machine.deadline == 21 * second)
        harness.now = 10 * second
        _ = harness.drained(to: 1900)
        #expect(harness.machine.deadline == 30 * second, "the client took bytes: the clock restarts")
        #expect(harness.machine.timerFired(now: 29 * second) == .wait)
        #expect(harness.machine.timerFired(now: 30 * second) == .close)
        #expect(harness.respond(1).isEmpty)
    }

    @Test func aLastAnswerTheClientNeverTakesIsClosedAfterTheIdleTimeout() {
        var harness = Harness(limits: HTTPLimits(maxUnsentBytes: 1000), idle: 20 * second)
        harness.answerBytes = 500
        _ = harness.read(get("/a", close: true))
        harness.now = 5 * second
        #expect(harness.respond(0) == [.write(status: 200, sequence: 0, closes: true), .closeAfterWrites])
        // A close after writes waits for the client to read what is left; this one never does.
        #expect(harness.machine.deadline == 25 * second)
        #expect(harness.machine.timerFired(now: 25 * second) == .close)
    }

    @Test func aLastAnswerTheClientTookLeavesTheCloseToTheSocket() {
        var harness = Harness(limits: HTTPLimits(maxUnsentBytes: 1000), idle: 20 * second)
        harness.answerBytes = 500
        _ = harness.read(get("/a", close: true))
        _ = harness.respond(0)
        #expect(harness.drained(to: 0).isEmpty)
        #expect(harness.machine.deadline == nil)
    }

    @Test func aMalformedRequestWaitingBehindTheBoundIsAnsweredOnceTheQueueDrains() {
        var harness = Harness(limits: HTTPLimits(maxUnsentBytes: 1000))
        harness.answerBytes = 2000
        _ = harness.read(get("/a"))
        #expect(harness.respond(0) == [.write(status: 200, sequence: 0, closes: false), .pauseReading])
        #expect(harness.read("BROKEN\r\n\r\n").isEmpty)
        #expect(
            harness.drained(to: 0) == [.write(status: 400, sequence: 1, closes: true), .closeAfterWrites])
    }

    @Test func theHeadClockRestartsWhenTheQueueDrains() {
        var harness = Harness(limits: HTTPLimits(maxUnsentBytes: 1000), head: 10 * second, idle: 60 * second)
        harness.answerBytes = 2000
        _ = harness.read(get("/a") + "GET /b HT")
        _ = harness.respond(0)
        harness.now = 30 * second
        // The head of /b waited for our queue, not for its client.
        #expect(harness.drained(to: 0) == [.resumeReading])
        #expect(harness.machine.deadline == 40 * second)
    }

    // MARK: - Timeouts

    @Test func aConnectionMustSendItsFirstHeadWithinTheHeadTimeout() {
        var harness = Harness(head: 5 * second)
        #expect(harness.machine.deadline == 5 * second)
        #expect(harness.machine.timerFired(now: 4 * second) == .wait)
        harness.now = 3 * second
        _ = harness.read("GET /slow HTTP/1.1\r\nHost")
        // The first request's clock started when the connection opened, not at its first byte.
        #expect(harness.machine.deadline == 5 * second)
        #expect(harness.machine.timerFired(now: 9 * second) == .close)
        #expect(harness.drain().isEmpty)
    }

    @Test func aLaterHeadMustCompleteWithinTheHeadTimeoutOfItsFirstByte() {
        var harness = Harness(head: 5 * second, idle: 60 * second)
        _ = harness.read(get("/a"))
        harness.now = 1 * second
        _ = harness.respond(0)
        #expect(harness.machine.deadline == 61 * second)
        harness.now = 30 * second
        _ = harness.read("GET /b HTTP/1.1\r\n")
        #expect(harness.machine.deadline == 35 * second)
        #expect(harness.machine.timerFired(now: 34 * second) == .wait)
        #expect(harness.machine.timerFired(now: 35 * second) == .close)
    }

    @Test func noDeadlineWhileAHandlerIsWorking() {
        var harness = Harness()
        _ = harness.read(get("/a"))
        #expect(harness.machine.deadline == nil)
        #expect(harness.machine.timerFired(now: 1000 * second) == .wait)
    }

    @Test func anIdleKeepAliveConnectionClosesAfterTheIdleTimeout() {
        var harness = Harness(head: 5 * second, idle: 20 * second)
        _ = harness.read(get("/a"))
        harness.now = 2 * second
        _ = harness.respond(0)
        #expect(harness.machine.timerFired(now: 21 * second) == .wait)
        #expect(harness.machine.timerFired(now: 22 * second) == .close)
    }

    @Test func aStalledBodyClosesAfterTheIdleTimeout() {
        var harness = Harness(head: 5 * second, idle: 20 * second)
        harness.now = 1 * second
        _ = harness.read("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        #expect(harness.machine.deadline == 21 * second)
        harness.now = 15 * second
        _ = harness.read("def")
        #expect(harness.machine.deadline == 35 * second)
    }

    @Test func aBodyThatKeepsComingIsAnswered408AtTheBodyTimeoutFromItsHead() {
        var harness = Harness(head: 5 * second, idle: 20 * second)
        harness.machine = HTTPConnectionStateMachine(
            limits: HTTPLimits(), timeouts: .init(head: 5 * second, idle: 20 * second, body: 30 * second), now: 0)
        harness.now = 1 * second
        _ = harness.read("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\na")
        // A byte every 10 s: the idle deadline moves, the body's does not.
        for at in [11, 21] {
            harness.now = UInt64(at) * second
            _ = harness.read("b")
        }
        #expect(harness.machine.deadline == 31 * second)
        #expect(harness.machine.timerFired(now: 30 * second) == .wait)
        #expect(harness.drain() == [])
        harness.now = 31 * second
        #expect(harness.machine.timerFired(now: 31 * second) == .wait)
        #expect(harness.drain() == [.write(status: 408, sequence: 0, closes: true), .closeAfterWrites])
        #expect(harness.read("cdefg") == [], "bytes after the 408 are dropped")
    }

    // MARK: - End of input, shutdown, upgrade

    @Test func peerHalfCloseStillGetsItsAnswersThenCloses() {
        var harness = Harness()
        _ = harness.read(get("/a"))
        harness.machine.inputEnded(now: 0)
        #expect(harness.drain() == [.pauseReading])
        #expect(harness.respond(0) == [.write(status: 200, sequence: 0, closes: true), .closeAfterWrites])
    }

    @Test func shutdownClosesAnIdleConnectionAtOnce() {
        var harness = Harness()
        harness.machine.shutdown(now: 0)
        #expect(harness.drain() == [.closeAfterWrites])
    }

    @Test func shutdownLetsTheRequestInFlightFinishWithConnectionClose() {
        var harness = Harness()
        _ = harness.read(get("/a"))
        harness.machine.shutdown(now: 0)
        #expect(harness.drain() == [.pauseReading])
        #expect(harness.read(get("/b")).isEmpty)
        #expect(harness.respond(0) == [.write(status: 200, sequence: 0, closes: true), .closeAfterWrites])
    }

    @Test func shutdownFinishesARequestStillArrivingAndReadsNothingAfterIt() {
        var harness = Harness()
        #expect(harness.read("POST /a HTTP/1.1\r\nContent-Length: 10\r\n\r\nhello") == [.acknowledge])
        harness.machine.shutdown(now: 0)
        #expect(harness.drain().isEmpty)
        #expect(harness.read("world" + get("/b")) == [.dispatch(path: "/a", sequence: 0), .pauseReading])
        #expect(harness.respond(0) == [.write(status: 200, sequence: 0, closes: true), .closeAfterWrites])
    }

    @Test func answersAfterCloseAreIgnored() {
        var harness = Harness()
        _ = harness.read(get("/a"))
        harness.machine.closed()
        #expect(harness.respond(0).isEmpty)
    }

    @Test func expectContinueIsAnsweredBeforeTheBody() {
        var harness = Harness()
        #expect(
            harness.read("POST /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n") == [.writeContinue])
        #expect(harness.read("ok") == [.dispatch(path: "/a", sequence: 0)])
    }

    // MARK: - Acknowledgements

    /// A client with Nagle's algorithm on (httpx) writes the head, then the body, which
    /// waits for the head's ACK: the kernel would delay it ~40 ms.
    @Test func aHeadWhoseBodyIsStillToComeIsAcknowledgedAtOnce() {
        var harness = Harness()
        #expect(harness.read("POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\n") == [.acknowledge])
        #expect(harness.read("hel") == [.acknowledge], "each read: the kernel leaves quick-ack mode by itself")
        #expect(harness.read("lo") == [.dispatch(path: "/a", sequence: 0)])
    }

    @Test func aRequestReadWholeNeedsNoAcknowledgement() {
        var harness = Harness()
        #expect(
            harness.read("POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello") == [.dispatch(path: "/a", sequence: 0)])
        _ = harness.respond(0)
        // Nor does a head still arriving: the body is what waits for an ACK.
        #expect(harness.read("GET /b HTTP/1.1\r\nHo").isEmpty)
    }

    @Test func anUpgradeRequestHandsOverTheBytesAfterIt() {
        var harness = Harness()
        let upgrade = "GET /v1/stream HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
        #expect(harness.read(upgrade + "\u{81}\u{0}") == [.dispatch(path: "/v1/stream", sequence: 0), .pauseReading])
        #expect(harness.machine.takeOver(sequence: 0) == [0xC2, 0x81, 0x00])
        #expect(harness.drain().isEmpty)
    }

    @Test func takeOverIsRefusedWithAnotherRequestInFlight() {
        var harness = Harness()
        _ = harness.read(get("/a") + get("/b"))
        #expect(harness.machine.takeOver(sequence: 1) == nil)
    }

    @Test func anUnansweredUpgradeClosesAfterItsResponse() {
        var harness = Harness()
        _ = harness.read("GET /x HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
        #expect(
            harness.respond(0, status: .notFound) == [
                .write(status: 404, sequence: 0, closes: true), .closeAfterWrites,
            ])
    }
}

extension HTTPConnectionStateMachine.Action: Equatable {
    public static func == (lhs: Self, rhs: Self) -> Bool {
        switch (lhs, rhs) {
        case (.wait, .wait), (.close, .close), (.closeAfterWrites, .closeAfterWrites), (.pauseReading, .pauseReading),
            (.resumeReading, .resumeReading), (.writeContinue, .writeContinue),
            (.acknowledgeReceived, .acknowledgeReceived):
            true
        default: false
        }
    }
}
