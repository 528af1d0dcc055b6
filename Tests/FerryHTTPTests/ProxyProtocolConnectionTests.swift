import FerryTestSupport
import Testing

@testable import FerryHTTP

private let second: UInt64 = 1_000_000_000
private let proxy = ClientAddress(IPAddress("10.0.0.5")!, port: 40000)
private let stranger = ClientAddress(IPAddress("203.0.113.50")!, port: 50000)
private let trusted = try! TrustedProxies(parsing: "10.0.0.0/8")

/// What the machine asked for, with the addresses the tests are about.
private enum Step: Equatable {
    case dispatch(path: String, from: ClientAddress?)
    case write(status: Int, from: ClientAddress?)
    case closeAfterWrites, close, other
}

/// A connection from `peer` to a server that trusts 10.0.0.0/8, read and answered at once.
private struct Connection {
    var machine: HTTPConnectionStateMachine
    var now: UInt64 = 0

    init(peer: ClientAddress) {
        machine = HTTPConnectionStateMachine(
            limits: HTTPLimits(), timeouts: .init(head: 10 * second, idle: 60 * second), now: 0,
            admission: HeadAdmission(client: peer, trustedProxies: trusted))
    }

    mutating func read(_ bytes: [UInt8]) -> [Step] {
        bytes.withUnsafeBytes { machine.read($0, now: now) }
        var steps: [Step] = []
        var unanswered: [UInt64] = []
        while true {
            switch machine.nextAction() {
            case .dispatch(let request, let number):
                steps.append(.dispatch(path: request.path, from: request.remoteAddress))
                unanswered.append(number)
            case .write(let response, let context):
                steps.append(.write(status: response.status.code, from: context.remoteAddress))
            case .closeAfterWrites: steps.append(.closeAfterWrites)
            case .close: steps.append(.close)
            case .wait:
                guard !unanswered.isEmpty else { return steps }
                for sequence in unanswered {
                    machine.respond(sequence: sequence, response: HTTPResponse(status: .ok), route: nil, now: now)
                }
                unanswered = []
            case .pauseReading, .resumeReading, .acknowledgeReceived, .writeContinue:
                steps.append(.other)
            }
        }
    }

    mutating func read(_ text: String) -> [Step] { read(Array(text.utf8)) }
}

private let get = "GET /a HTTP/1.1\r\nHost: t\r\n\r\n"
private let client = ClientAddress(IPAddress("192.0.2.1")!, port: 56324)

@Suite(.tagSelection) struct ProxyProtocolConnectionTests {
    @Test func aTrustedProxysHeaderNamesWhomEveryRequestComesFrom() {
        var connection = Connection(peer: proxy)
        let header = ProxyHeaders.v1(
            source: "192.0.2.1", sourcePort: 56324, destination: "10.0.0.1", destinationPort: 80)
        #expect(
            connection.read(header + Array((get + get).utf8))
                == [
                    .dispatch(path: "/a", from: client), .dispatch(path: "/a", from: client),
                    .write(status: 200, from: client), .write(status: 200, from: client),
                ])
        #expect(connection.read(get) == [.dispatch(path: "/a", from: client), .write(status: 200, from: client)])
    }

    @Test func aHeaderSplitAcrossReadsIsReadBeforeTheRequest() {
        var connection = Connection(peer: proxy)
        let header = ProxyHeaders.v2(
            source: "192.0.2.1", sourcePort: 56324, destination: "10.0.0.1", destinationPort: 80)
        #expect(connection.read(Array(header.prefix(10))) == [])
        #expect(connection.read(Array(header[10..<20])) == [])
        #expect(
            connection.read(Array(header[20...]) + Array(get.utf8))
                == [.dispatch(path: "/a", from: client), .write(status: 200, from: client)])
    }

    @Test func aLocalHeaderLeavesTheConnectionSpeakingForItself() {
        var connection = Connection(peer: proxy)
        #expect(
            connection.read(ProxyHeaders.v2(command: 0x20, family: 0, payload: []) + Array(get.utf8))
                == [.dispatch(path: "/a", from: proxy), .write(status: 200, from: proxy)])
    }

    @Test func aTrustedProxyWithoutAHeaderIsRefused() {
        var connection = Connection(peer: proxy)
        #expect(connection.read(get) == [.write(status: 400, from: proxy), .closeAfterWrites])
    }

    @Test func aMalformedHeaderIsRefused() {
        var connection = Connection(peer: proxy)
        #expect(
            connection.read("PROXY TCP4 192.0.2.1 10.0.0.1 99999 80\r\n" + get)
                == [.write(status: 400, from: proxy), .closeAfterWrites])
    }

    @Test func aHeaderThatNeverEndsIsClosedAtTheHeadTimeout() {
        var connection = Connection(peer: proxy)
        #expect(connection.read("PROXY TCP4 192.0.2.1") == [])
        #expect(connection.machine.deadline == 10 * second)
        #expect(connection.machine.timerFired(now: 10 * second) == .close)
    }

    @Test func anUntrustedPeersHeaderIsBadHTTPAndChangesNothing() {
        for header in [
            ProxyHeaders.v1(source: "192.0.2.1", sourcePort: 1, destination: "10.0.0.1", destinationPort: 80),
            ProxyHeaders.v2(source: "192.0.2.1", sourcePort: 1, destination: "10.0.0.1", destinationPort: 80),
        ] {
            var connection = Connection(peer: stranger)
            #expect(
                connection.read(header + Array(get.utf8)) == [.write(status: 400, from: stranger), .closeAfterWrites])
        }
        var connection = Connection(peer: stranger)
        #expect(connection.read(get) == [.dispatch(path: "/a", from: stranger), .write(status: 200, from: stranger)])
    }

    @Test func aSecondHeaderIsBadHTTP() {
        var connection = Connection(peer: proxy)
        let header = ProxyHeaders.v1(
            source: "192.0.2.1", sourcePort: 56324, destination: "10.0.0.1", destinationPort: 80)
        #expect(connection.read(header + header) == [.write(status: 400, from: client), .closeAfterWrites])
    }
}
