import FerryLoad
import FerryTestSupport
import Testing

@Suite(.tagSelection) struct ServerSentEventsTests {
    @Test func readsEventsCommentsAndLineEndings() throws {
        var decoder = ServerSentEventsDecoder()
        let stream =
            "event: hello\ndata: {\"type\":\"hello\"}\n\n: ping\r\n\r\nevent: cue\r\ndata: {\"a\":1}\r\ndata: x\r\n\r\n"
        let events = try decoder.decode(Array(stream.utf8))
        #expect(
            events == [
                .message(type: "hello", data: Array(#"{"type":"hello"}"#.utf8)),
                .comment,
                .message(type: "cue", data: Array("{\"a\":1}\nx".utf8)),
            ])
    }

    @Test func anEventSplitAcrossReadsArrivesWhenItsBlankLineDoes() throws {
        var decoder = ServerSentEventsDecoder()
        #expect(try decoder.decode(Array("event: cue\nda".utf8)).isEmpty)
        #expect(try decoder.decode(Array("ta: {}\r".utf8)).isEmpty)
        #expect(try decoder.decode(Array("\n\r\n".utf8)) == [.message(type: "cue", data: Array("{}".utf8))])
    }

    @Test func anEventWithoutTypeIsAMessage() throws {
        var decoder = ServerSentEventsDecoder()
        #expect(try decoder.decode(Array("data:1\n\n".utf8)) == [.message(type: "message", data: [0x31])])
    }

    @Test func chunkedBodiesAreJoinedWhateverTheSplit() throws {
        let body = Array("7\r\nevent: \r\n5;ext=1\r\ncue\n\n\r\n0\r\n\r\n".utf8)
        for split in 0...body.count {
            var decoder = ChunkedBodyDecoder()
            let data = try decoder.decode(body[..<split]) + decoder.decode(body[split...])
            #expect(String(decoding: data, as: UTF8.self) == "event: cue\n\n")
            #expect(decoder.isFinished)
        }
    }

    @Test func aBadChunkSizeIsAnError() {
        var decoder = ChunkedBodyDecoder()
        #expect(throws: SSEProtocolError.self) { try decoder.decode(Array("zz\r\n".utf8)) }
    }
}

@Suite(.tagSelection) struct MessageTypeTests {
    @Test func findsTheTypeWithOrWithoutSpaces() {
        #expect(messageType(ofJSON: Array(#"{"type":"cue","tables":["t"],"origin":null}"#.utf8)) == "cue")
        #expect(messageType(ofJSON: Array(#"{ "user_id": "u", "type" : "hello" }"#.utf8)) == "hello")
        #expect(messageType(ofJSON: Array(#"{"tables":["type"],"type":"cue"}"#.utf8)) == "cue")
        #expect(messageType(ofJSON: Array(#"{"kind":"cue"}"#.utf8)) == nil)
    }
}
