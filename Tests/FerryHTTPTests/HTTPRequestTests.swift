import FerryTestSupport
import Testing

@testable import FerryHTTP

@Suite(.tagSelection) struct HTTPRequestTests {
    @Test func queryParametersArePercentDecoded() throws {
        let request = HTTPRequest(method: .get, path: "/v1/pull", query: "cursor=a%2Fb%3D&limit=10&q=x+y&flag")
        #expect(try request.queryParameter("cursor") == "a/b=")
        #expect(try request.queryParameter("limit") == "10")
        #expect(try request.queryParameter("q") == "x y")
        #expect(try request.queryParameter("flag") == "")
        #expect(try request.queryParameter("missing") == nil)
    }

    @Test func aPlusInAQueryIsASpaceAndPercent2BAPlus() throws {
        #expect(try HTTPRequest(method: .get, path: "/", query: "q=a+b%2Bc").queryParameter("q") == "a b+c")
    }

    @Test(arguments: ["%zz", "%", "%f", "x%g0", "%ff%fe", "%C3", "%c0%af", "%ed%a0%80", "%00", "cur%00rent"])
    func aValueThatDoesNotDecodeIsPresentButUndecodable(value: String) {
        let request = HTTPRequest(method: .get, path: "/", query: "other=1&a=\(value)")
        #expect(throws: URLDecodingError(name: "a")) { try request.queryParameter("a") }
        #expect(throws: Never.self) { try request.queryParameter("other") }
    }

    @Test func aNameThatDoesNotDecodeNamesNothingAndTheFirstValueWins() throws {
        #expect(try HTTPRequest(method: .get, path: "/", query: "%zz=1&a=2").queryParameter("a") == "2")
        #expect(try HTTPRequest(method: .get, path: "/", query: "a%00=1").queryParameter("a") == nil)
        #expect(try HTTPRequest(method: .get, path: "/", query: "%61=3&a=%zz").queryParameter("a") == "3")
    }

    @Test func percentDecodingIsStrict() {
        #expect(PercentDecoding.decode(Array("a%2Fb+c".utf8), plusIsSpace: false) == "a/b+c")
        #expect(PercentDecoding.decode(Array("%e2%82%AC é".utf8), plusIsSpace: false) == "€ é")
        #expect(PercentDecoding.decode(Array("".utf8), plusIsSpace: true) == "")
        #expect(PercentDecoding.decode([0x61, 0x00, 0x62], plusIsSpace: false) == nil)
        #expect(PercentDecoding.decode([0x61, 0xFF], plusIsSpace: false) == nil)
        #expect(PercentDecoding.decode(Array("%".utf8), plusIsSpace: false) == nil)
        #expect(PercentDecoding.decode(Array("%0".utf8), plusIsSpace: false) == nil)
    }

    @Test func aRequestTargetThatIsNotUTF8IsMalformedAndUTF8PassesAsSent() {
        func decode(_ target: [UInt8]) -> HTTPRequestDecoder.Event {
            var decoder = HTTPRequestDecoder(limits: HTTPLimits())
            let bytes = Array("GET ".utf8) + target + Array(" HTTP/1.1\r\nHost: a\r\n\r\n".utf8)
            return bytes.withUnsafeBytes { decoder.decode($0) }.event
        }
        guard case .error(.malformed) = decode(Array("/v1/locks/active_game/".utf8) + [0xFF, 0xFE]) else {
            Issue.record("a target with bytes that are not UTF-8 was accepted")
            return
        }
        guard case .request(let request, _, _) = decode(Array("/caf\u{e9}?q=\u{e9}".utf8)) else {
            Issue.record("a UTF-8 target was refused")
            return
        }
        #expect(request.path == "/caf\u{e9}" && request.query == "q=\u{e9}")
    }

    @Test func headerLookupIgnoresCaseAndKeepsOrder() {
        var headers: HTTPHeaders = ["Content-Type": "a", "X-A": "1"]
        headers.add(name: "x-a", value: "2")
        #expect(headers["content-TYPE"] == "a")
        #expect(headers.values(for: "X-A") == ["1", "2"])
        headers.replaceOrAdd(name: "X-a", value: "3")
        #expect(headers.map(\.name) == ["Content-Type", "X-a"])
        #expect(!"ab".equalsIgnoringASCIICase("a"))
        // Bit 5 differs between "@" and "`", which are not letters.
        #expect(!"@".equalsIgnoringASCIICase("`"))
    }
}
