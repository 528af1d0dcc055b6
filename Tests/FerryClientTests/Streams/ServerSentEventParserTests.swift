import FerryTestSupport
import Testing

@testable import FerryClient

/// The event-stream parser against WHATWG's rules and Ferry's own framing.
@Suite(.tagSelection) struct ServerSentEventParserTests {
    func events(_ chunks: [String], parser: inout ServerSentEventParser) throws -> [ServerSentEvent] {
        var events: [ServerSentEvent] = []
        for chunk in chunks { events += try parser.parse(Array(chunk.utf8)) }
        return events
    }

    func events(_ chunks: String...) throws -> [ServerSentEvent] {
        var parser = ServerSentEventParser()
        return try events(chunks, parser: &parser)
    }

    @Test func ferrysFramingGivesEachMessageOnceAndSkipsTheRetryHintAndPings() throws {
        var parser = ServerSentEventParser()
        let stream = [
            "retry: 3000\n\n", "event: hello\ndata: {\"type\":\"hello\"}\n\n", ": ping\n\n",
            "event: cue\ndata: {\"type\":\"cue\"}\n\n",
        ]
        let parsed = try events(stream, parser: &parser)
        #expect(parsed.map(\.type) == ["hello", "cue"])
        #expect(parsed.map(\.data) == [#"{"type":"hello"}"#, #"{"type":"cue"}"#])
        #expect(parser.retryMilliseconds == 3000)
    }

    @Test func carriageReturnLineFeedAndLoneCarriageReturnEndLinesAsLineFeedDoes() throws {
        let expected = [ServerSentEvent(type: "cue", data: "x", lastEventID: "")]
        #expect(try events("event: cue\r\ndata: x\r\n\r\n") == expected)
        #expect(try events("event: cue\rdata: x\r\r") == expected)
        #expect(try events("event: cue\ndata: x\n\n") == expected)
    }

    @Test func aLineSplitAnywhereBetweenChunksParsesTheSame() throws {
        let whole = "event: cue\r\ndata: {\"a\":1}\r\n\r\n: ping\r\n\r\nevent: hello\ndata: y\n\n"
        let expected = try events(whole)
        #expect(expected.count == 2)
        let bytes = Array(whole.utf8)
        for split in 1..<bytes.count {
            var parser = ServerSentEventParser()
            let parsed = try parser.parse(bytes[..<split]) + parser.parse(bytes[split...])
            #expect(parsed == expected, "split at \(split)")
        }
    }

    @Test func dataLinesJoinWithLineFeedsAndOneLeadingSpaceIsDropped() throws {
        let parsed = try events("data: one\ndata:two\ndata:  three\ndata\n\n")
        #expect(parsed == [ServerSentEvent(type: "message", data: "one\ntwo\n three\n", lastEventID: "")])
    }

    @Test func commentsAndEventsWithoutDataDispatchNothing() throws {
        #expect(try events(": ping\n\n", "event: cue\n\n", "id: 7\n\n", "\n\n\n").isEmpty)
        // The type of a dispatched-nothing event does not leak into the next one.
        #expect(try events("event: cue\n\ndata: x\n\n").map(\.type) == ["message"])
    }

    @Test func theLastEventIDCarriesOverAndARetryHintNeedsDigitsOnly() throws {
        var parser = ServerSentEventParser()
        let parsed = try events(["id: 1\ndata: a\n\n", "data: b\n\n", "retry: 12x\n", "retry: 250\n"], parser: &parser)
        #expect(parsed.map(\.lastEventID) == ["1", "1"])
        #expect(parser.retryMilliseconds == 250)
        let before = parser.retryMilliseconds
        _ = try parser.parse(Array("retry: soon\n".utf8))
        #expect(parser.retryMilliseconds == before)
    }

    @Test func unknownFieldsAreIgnored() throws {
        #expect(
            try events("colour: red\ndata: x\nnonsense\n\n") == [
                ServerSentEvent(type: "message", data: "x", lastEventID: "")
            ])
    }

    @Test func aByteOrderMarkOpeningTheStreamIsNotPartOfTheFirstField() throws {
        #expect(try events("\u{FEFF}event: cue\ndata: x\n\n").map(\.type) == ["cue"])
    }

    @Test func aLineOverTheBoundThrowsInsteadOfGrowing() throws {
        var parser = ServerSentEventParser(maximumLineBytes: 16, maximumEventBytes: 1024)
        #expect(try parser.parse(Array("data: 0123456789\n".utf8)).isEmpty)
        // A server that never ends its line: the parser holds at most the bound.
        #expect(throws: ServerSentEventParser.Overflow.self) {
            for _ in 0..<100 { _ = try parser.parse(Array("xxxxxxxx".utf8)) }
        }
    }

    @Test func anEventWhoseDataLinesAddUpOverTheBoundThrows() throws {
        var parser = ServerSentEventParser(maximumLineBytes: 64, maximumEventBytes: 100)
        #expect(throws: ServerSentEventParser.Overflow.self) {
            for _ in 0..<20 { _ = try parser.parse(Array("data: 0123456789\n".utf8)) }
        }
    }
}
