import FerryHTTP
import FerryLoop
import FerryTestSupport
import Foundation
import Testing

/// Server-Sent Event streams over real sockets.
@Suite(.hangLimit, .tags(.process), .tagSelection) struct ServerSentEventStreamTests {
    /// Opens `GET /sse` and reads the head; the stream is number `number` of `server`.
    func open(_ server: StreamTestServer, number: Int) throws -> HTTPTestClient {
        let client = try server.client()
        try client.send("GET /sse HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n")
        #expect(server.log.waitFor("open \(number)"))
        return client
    }

    @Test func eventsPingsRetryAndTheClosedEventAreWrittenByteExact() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let client = try server.client()
        try client.send("GET /sse HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(server.log.waitFor("open 1"))
        server.onStream(1) { stream in
            stream?.send(type: "hello", json: Array(#"{"type":"hello","heartbeat_ms":25000}"#.utf8))
            #expect(stream?.heartbeat() == true)
            stream?.send(type: "cue", json: Array(#"{"type":"cue","tables":["t"],"origin":null}"#.utf8))
            stream?.close(code: 4001, reason: "token_expired")
            #expect(stream?.isOpen == false)
            // Dropped once closing.
            stream?.send(type: "cue", json: Array("{}".utf8))
        }
        // The body runs to the connection's close.
        let response = try client.readResponse()
        #expect(response.status == 200)
        #expect(response.header("Content-Type") == "text/event-stream")
        #expect(response.header("Cache-Control") == "no-store")
        #expect(response.header("X-Accel-Buffering") == "no")
        #expect(response.header("Connection") == "close")
        #expect(response.header("Content-Length") == nil && response.header("Transfer-Encoding") == nil)
        #expect(response.header("Date")?.hasSuffix(" GMT") == true)
        let expected =
            "retry: 1500\n\n"
            + "event: hello\ndata: {\"type\":\"hello\",\"heartbeat_ms\":25000}\n\n"
            + ": ping\n\n"
            + "event: cue\ndata: {\"type\":\"cue\",\"tables\":[\"t\"],\"origin\":null}\n\n"
            + "event: closed\ndata: {\"code\":4001,\"reason\":\"token_expired\"}\n\n"
        #expect(response.text == expected)
        client.close()
        #expect(server.log.waitFor("close 1"))
        #expect(server.log.count("close 1") == 1)
    }

    @Test func httpxReadsTheStreamToItsEnd() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let run = try PythonScript.run(
            arguments: [PythonScript.path("event_stream.py"), "http://127.0.0.1:\(server.port)/sse/script"])
        #expect(run.status == 0, "event_stream.py failed:\n\(run.output)")
        #expect(run.output.contains("the event stream read as PROTOCOL.md says"), "\(run.output)")
        #expect(server.log.waitFor("close 1"))
    }

    @Test func aClientThatGoesAwayIsNoticedAndWhatItSendsIsIgnored() throws {
        let server = try StreamTestServer()
        defer { server.stop() }
        let leaving = try open(server, number: 1)
        let staying = try open(server, number: 2)
        try staying.send("GET /nonsense HTTP/1.1\r\n\r\nmore garbage")
        leaving.close()
        #expect(server.log.waitFor("close 1"))
        server.onStream(2) { stream in
            #expect(stream?.isOpen == true)
            stream?.send(type: "cue", json: Array("{}".utf8))
        }
        _ = try staying.readResponse(toHead: true)
        let expected = "retry: 1500\n\nevent: cue\ndata: {}\n\n"
        #expect(String(decoding: try staying.readBytes(expected.utf8.count), as: UTF8.self) == expected)
        #expect(!server.log.all.contains("close 2"))
        #expect(server.log.all.filter { $0.hasPrefix("message") }.isEmpty)
    }

    /// A stream closed `4008 too_slow` has bytes its client is not reading: its last event
    /// never goes out, and the stream must not wait for it forever.
    @Test func aStreamClosedWhileItsClientReadsNothingIsGone() throws {
        let server = try StreamTestServer(sendBufferSize: 4096)
        defer { server.stop() }
        let client = try HTTPTestClient(port: server.port, receiveBufferBytes: 4096)
        try client.send("GET /sse HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(server.log.waitFor("open 1"))
        let payload = Array(("{\"pad\":\"" + String(repeating: "x", count: 1000) + "\"}").utf8)
        let stalled = server.onStream(1) { stream -> Bool in
            guard let stream else { return false }
            for _ in 0..<4000 where stream.unsentBytes == 0 { stream.send(type: "cue", json: payload) }
            // 64 KiB more than the kernel would take: room it makes later cannot drain them.
            for _ in 0..<64 { stream.send(type: "cue", json: payload) }
            stream.close(code: 4008, reason: "too_slow")
            return stream.unsentBytes > 64 << 10
        }
        #expect(stalled, "the kernel took everything")
        #expect(server.log.waitFor("close 1", timeout: 10))
    }
}
