import FerryHTTP
import FerryLoop
import FerryTestSupport
import Foundation
import Testing

/// What both transports of ``EventStream`` (``WebSocketStream`` and
/// ``ServerSentEventStream``) do alike, over real sockets: one test per behaviour,
/// run once per transport.
@Suite(.hangLimit, .tags(.process), .tagSelection) struct EventStreamTests {
    /// A client of `server`'s stream number 1 that has read nothing past its request.
    enum Reader {
        case webSocket(RawWebSocket)
        case serverSentEvents(HTTPTestClient)

        init(_ server: StreamTestServer, _ transport: StreamTestClient.Transport) throws {
            switch transport {
            case .webSocket:
                self = .webSocket(try RawWebSocket(server))
            case .serverSentEvents:
                let client = try server.client()
                try client.send("GET /sse HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n")
                self = .serverSentEvents(client)
            }
            #expect(server.log.waitFor("open 1"))
        }

        /// Reads the next `count` `cue` messages of `payload` (and, on SSE, the head and
        /// the retry hint before them).
        func read(_ count: Int, of payload: [UInt8]) throws {
            switch self {
            case .webSocket(let socket):
                for _ in 0..<count { #expect(try socket.readText().utf8.count == payload.count) }
            case .serverSentEvents(let client):
                _ = try client.readResponse(toHead: true)
                let eventSize = "event: cue\ndata: \n\n".utf8.count + payload.count
                _ = try client.readBytes("retry: 1500\n\n".utf8.count + count * eventSize)
            }
        }
    }

    @Test(arguments: StreamTestClient.Transport.allCases)
    func onWritableFiresOnceANonReadingClientReadsAgain(transport: StreamTestClient.Transport) throws {
        let server = try StreamTestServer(sendBufferSize: 4096)
        defer { server.stop() }
        let reader = try Reader(server, transport)
        let payload = Array(("{\"pad\":\"" + String(repeating: "x", count: 1000) + "\"}").utf8)
        // Fill the socket until the kernel stops taking bytes (bounded: 4 MB at most).
        let sent = server.onStream(1) { stream -> Int in
            guard let stream else { return 0 }
            var count = 0
            while stream.unsentBytes == 0 && count < 4000 {
                stream.send(type: "cue", json: payload)
                count += 1
            }
            return stream.unsentBytes > 0 ? count : 0
        }
        #expect(sent > 0, "the kernel took everything")
        #expect(!server.log.all.contains("writable 1"))
        try reader.read(sent, of: payload)
        #expect(server.log.waitFor("writable 1"))
        #expect(server.onStream(1) { $0?.unsentBytes } == 0)
    }
}
