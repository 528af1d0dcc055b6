import FerryTestSupport
import Testing

@testable import FerryGateway

/// ``RequestBody/refusal(of:)``: the check every JSON body passes before anything reads
/// it (PROTOCOL.md's notes): one JSON value, well-formed UTF-8, at most 128 arrays and
/// objects deep. No sockets.
@Suite(.tagSelection) struct RequestBodyTests {
    func refusal(_ bytes: [UInt8]) -> String? {
        RequestBody.refusal(of: bytes)?.message
    }

    func refusal(_ text: String) -> String? { refusal(Array(text.utf8)) }

    @Test func validBodiesPass() {
        for body in [
            #"{"a": "café € 𝄞", "b": [1, -2.5e3, true, false, null], "c": {"d": "\u00e9\ud834\udd1e\u0000"}}"#,
            " [] ", "5", #""just a string""#,
        ] {
            #expect(refusal(body) == nil, "\(body)")
        }
    }

    @Test func malformedUTF8IsRefusedWhereverItIs() {
        let wrapped: [[UInt8]] = [
            [0xFF], [0x80], [0xC3], [0xC0, 0xAF], [0xE0, 0x80, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80],
            [0xF0, 0x9D, 0x84], [0xE2, 0x82, 0x41],
        ]
        for bad in wrapped {
            let body = Array(#"{"ignored": "x"#.utf8) + bad + Array(#"y"}"#.utf8)
            #expect(refusal(body) == "the body is not valid JSON: a string is not UTF-8", "\(bad)")
        }
        #expect(refusal([0xEF, 0xBB, 0xBF] + Array("{}".utf8)) == "the body is not valid JSON", "a byte-order mark")
    }

    @Test func nestingDeeperThanTheLimitIsRefused() {
        func nested(_ depth: Int) -> String {
            String(repeating: #"{"a":["#, count: depth / 2) + (depth % 2 == 1 ? "{}" : "1")
                + String(repeating: "]}", count: depth / 2)
        }
        #expect(RequestBody.maximumDepth == 128)
        #expect(refusal(nested(128)) == nil)
        #expect(refusal(nested(129)) == "the body nests arrays and objects more than 128 deep")
        #expect(
            refusal(String(repeating: "[", count: 100_000)) == "the body nests arrays and objects more than 128 deep")
    }

    @Test func whatIsNotJSONIsRefused() {
        for body in ["", "{", #"{"a": 1} x"#, #"{"a": "\ud800"}"#, "{'a': 1}", #"{"a": 01}"#, "[1,]", "\u{1}"] {
            #expect(refusal(body) == "the body is not valid JSON", "\(body)")
        }
    }
}
