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
    /// The body of every request dispatched, as text.
    var bodies: [String] = []

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
                bodies.append(String(decoding: request.body, as: UTF8.self))
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

    /// What a gateway forwarding a sign-in to another shard's sends: no header, and the
    /// client in `X-Forwarded-For`.
    @Test func aTrustedProxyWithoutAHeaderIsWhomItsForwardedForNames() {
        var connection = Connection(peer: proxy)
        let forwarded = "GET /a HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n"
        let named = ClientAddress(IPAddress("192.0.2.1")!, port: nil)
        #expect(
            connection.read(forwarded + get)
                == [
                    .dispatch(path: "/a", from: named), .dispatch(path: "/a", from: proxy),
                    .write(status: 200, from: named), .write(status: 200, from: proxy),
                ])
        // Only the first bytes of a connection may be a header.
        #expect(
            connection.read(
                ProxyHeaders.v1(source: "192.0.2.1", sourcePort: 1, destination: "10.0.0.1", destinationPort: 80))
                == [.write(status: 400, from: proxy), .closeAfterWrites])
    }

    @Test func aRequestSentAByteAtATimeThatBeginsLikeASignatureIsServedWhole() {
        for text in ["PROPFIND /a HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n", "\r\n" + get] {
            var connection = Connection(peer: proxy)
            let bytes = Array(text.utf8)
            for byte in bytes.dropLast() { #expect(connection.read([byte]) == []) }
            let from = text.hasPrefix("PROP") ? ClientAddress(IPAddress("192.0.2.1")!, port: nil) : proxy
            #expect(
                connection.read([bytes.last!]) == [.dispatch(path: "/a", from: from), .write(status: 200, from: from)])
        }
    }

    @Test func theStartOfASignatureThatNeverEndsIsClosedAtTheHeadTimeout() {
        var connection = Connection(peer: proxy)
        #expect(connection.read("PROX") == [])
        #expect(connection.machine.deadline == 10 * second)
        #expect(connection.machine.timerFired(now: 10 * second) == .close)
    }

    /// The client a header names is no proxy: what it writes in `X-Forwarded-For` is its own.
    @Test func aHeaderNamingAClientLeavesItsForwardedForUnread() {
        var connection = Connection(peer: proxy)
        let header = ProxyHeaders.v2(
            source: "192.0.2.1", sourcePort: 56324, destination: "10.0.0.1", destinationPort: 80)
        #expect(
            connection.read(header + Array("GET /a HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 198.51.100.7\r\n\r\n".utf8))
                == [.dispatch(path: "/a", from: client), .write(status: 200, from: client)])
    }

    @Test func aBodyThatStartsLikeAHeaderIsABody() {
        let body = "PROXY TCP4 198.51.100.7 10.0.0.1 1 80\r\n"
        let post = "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body
        let header = ProxyHeaders.v1(
            source: "192.0.2.1", sourcePort: 56324, destination: "10.0.0.1", destinationPort: 80)
        for (start, from) in [([UInt8](), proxy), (header, client)] {
            var connection = Connection(peer: proxy)
            #expect(
                connection.read(start + Array((post + post).utf8))
                    == [
                        .dispatch(path: "/a", from: from), .dispatch(path: "/a", from: from),
                        .write(status: 200, from: from), .write(status: 200, from: from),
                    ])
            #expect(connection.bodies == [body, body])
        }
    }

    @Test func anUntrustedPeersForwardedForIsNotRead() {
        var connection = Connection(peer: stranger)
        #expect(
            connection.read("GET /a HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n")
                == [.dispatch(path: "/a", from: stranger), .write(status: 200, from: stranger)])
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
