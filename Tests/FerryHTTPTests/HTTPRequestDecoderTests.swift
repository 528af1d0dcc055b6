import FerryTestSupport
import Testing

@testable import FerryHTTP

/// What a decoder made of some bytes.
enum Decoded: Equatable {
    case request(method: HTTPMethod, path: String, query: String?, body: String, keepAlive: Bool)
    case error(HTTPRequestError)
    /// Refused at its head (``HeadAdmission``), with this status.
    case refused(status: Int)
}

/// Feeds `chunks` one after another, decoding every request they hold.
func decode(_ chunks: [[UInt8]], limits: HTTPLimits = HTTPLimits()) -> [Decoded] {
    var decoder = HTTPRequestDecoder(limits: limits)
    var results: [Decoded] = []
    outer: for chunk in chunks {
        var offset = 0
        while offset < chunk.count {
            let (consumed, event) = chunk[offset...].withUnsafeBytes { decoder.decode($0) }
            offset += consumed
            switch event {
            case .needMoreBytes: continue
            case .request(let request, _, _):
                results.append(
                    .request(
                        method: request.method, path: request.path, query: request.query,
                        body: String(decoding: request.body, as: UTF8.self), keepAlive: request.keepAlive))
            case .error(let error):
                results.append(.error(error))
                break outer
            case .refused(let response):
                results.append(.refused(status: response.status.code))
                break outer
            }
        }
    }
    return results
}

func decode(_ text: String, limits: HTTPLimits = HTTPLimits()) -> [Decoded] {
    decode([Array(text.utf8)], limits: limits)
}

private let post = "POST /v1/push?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"
private let chunked =
    "POST /v1/push HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"

@Suite(.tagSelection) struct HTTPRequestDecoderTests {
    @Test func decodesAGetWithHeadersInOrder() throws {
        var decoder = HTTPRequestDecoder(limits: HTTPLimits())
        let bytes = Array("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Trace: a\r\nx-trace: b\r\n\r\n".utf8)
        let (consumed, event) = bytes.withUnsafeBytes { decoder.decode($0) }
        #expect(consumed == bytes.count)
        guard case .request(let request, let isHTTP10, _) = event else {
            Issue.record("expected a request, got \(event)")
            return
        }
        #expect(!isHTTP10)
        #expect(request.method == .get && request.path == "/healthz" && request.query == nil)
        #expect(request.headers["HOST"] == "x")
        #expect(request.headers.values(for: "X-Trace") == ["a", "b"])
        #expect(request.keepAlive)
    }

    @Test func decodesAContentLengthBodyAndQuery() {
        #expect(
            decode(post) == [.request(method: .post, path: "/v1/push", query: "x=1", body: "hello", keepAlive: true)])
    }

    @Test func decodesAChunkedBody() {
        #expect(
            decode(chunked) == [
                .request(method: .post, path: "/v1/push", query: nil, body: "hello world", keepAlive: true)
            ])
    }

    @Test func trailersAreDroppedAndLeaveTheNextRequestsHeadersAlone() {
        let bytes = Array(
            ("POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n"
                + "Authorization: Bearer trailer\r\nX-T: v\r\n\r\n"
                + "GET /b HTTP/1.1\r\nAuthorization: Bearer mine\r\nHost: b\r\n\r\n").utf8)
        var decoder = HTTPRequestDecoder(limits: HTTPLimits())
        var requests: [HTTPRequest] = []
        var offset = 0
        while offset < bytes.count {
            let (consumed, event) = bytes[offset...].withUnsafeBytes { decoder.decode($0) }
            offset += consumed
            guard case .request(let request, _, _) = event else { continue }
            requests.append(request)
        }
        #expect(
            requests.map { Array($0.headers.map(\.name)) } == [
                ["Host", "Transfer-Encoding"], ["Authorization", "Host"],
            ])
        #expect(requests.first?.body == Array("hi".utf8))
        #expect(requests.last?.headers["Authorization"] == "Bearer mine")
    }

    @Test func decodesPipelinedRequestsFromOneRead() {
        let three = "GET /a HTTP/1.1\r\n\r\n" + post + "GET /c HTTP/1.1\r\nConnection: close\r\n\r\n"
        #expect(
            decode(three) == [
                .request(method: .get, path: "/a", query: nil, body: "", keepAlive: true),
                .request(method: .post, path: "/v1/push", query: "x=1", body: "hello", keepAlive: true),
                .request(method: .get, path: "/c", query: nil, body: "", keepAlive: false),
            ])
    }

    @Test func stopsAfterEachRequestSoTheCallerControlsPipelining() {
        var decoder = HTTPRequestDecoder(limits: HTTPLimits())
        let bytes = Array("GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n".utf8)
        let (consumed, _) = bytes.withUnsafeBytes { decoder.decode($0) }
        #expect(consumed == "GET /a HTTP/1.1\r\n\r\n".utf8.count)
    }

    @Test func decodesARequestFedOneByteAtATime() {
        for text in [post, chunked] {
            let whole = decode(text)
            let bytes = Array(text.utf8)
            #expect(decode(bytes.map { [$0] }) == whole)
        }
    }

    @Test func decodesARequestSplitAtEveryBoundary() {
        for text in [post, chunked, "GET /a?b=c HTTP/1.1\r\nHost: example\r\nAccept: */*\r\n\r\n"] {
            let bytes = Array(text.utf8)
            let whole = decode(text)
            #expect(whole.count == 1)
            for split in 1..<bytes.count {
                #expect(decode([Array(bytes[..<split]), Array(bytes[split...])]) == whole, "split at \(split)")
            }
        }
    }

    @Test func headerNamesAndValuesSplitAcrossReadsAreJoined() {
        var decoder = HTTPRequestDecoder(limits: HTTPLimits())
        var request: HTTPRequest?
        for chunk in ["GET / HTTP/1.1\r\nAuthor", "ization: Bea", "rer abc\r\nX-Empty:\r\nX-Last: z\r\n\r\n"] {
            let bytes = Array(chunk.utf8)
            if case .request(let decoded, _, _) = bytes.withUnsafeBytes({ decoder.decode($0) }).event {
                request = decoded
            }
        }
        #expect(request?.headers["authorization"] == "Bearer abc")
        #expect(request?.headers["x-empty"] == "")
        #expect(request?.headers["x-last"] == "z")
    }

    @Test func http10WithoutKeepAliveClosesAndWithItStaysOpen() {
        #expect(
            decode("GET / HTTP/1.0\r\n\r\n") == [
                .request(method: .get, path: "/", query: nil, body: "", keepAlive: false)
            ])
        #expect(
            decode("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n") == [
                .request(method: .get, path: "/", query: nil, body: "", keepAlive: true)
            ])
    }

    // MARK: - Refusals

    @Test(arguments: [
        "GARBAGE\r\n\r\n",
        "GET / HTTP/9.9\r\n\r\n",
        "GET /\u{1} HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nBad(Header: x\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ])
    func malformedRequestsAreRefused(text: String) {
        let result = decode(text)
        guard case .error(.malformed) = result.last else {
            Issue.record("expected malformed, got \(result)")
            return
        }
    }

    @Test func malformedErrorAnswersInvalidRequest() {
        let response = HTTPRequestError.malformed("x").response
        #expect(response.status == .badRequest)
        #expect(String(decoding: response.body, as: UTF8.self).contains(#""code":"invalid_request""#))
    }

    @Test func aBodyOverTheLimitIsPayloadTooLarge() {
        let limits = HTTPLimits(maxBodyBytes: 4)
        #expect(decode(post, limits: limits) == [.error(.payloadTooLarge)])
        #expect(decode(chunked, limits: limits) == [.error(.payloadTooLarge)])
        // Exactly at the limit is fine.
        #expect(decode(post, limits: HTTPLimits(maxBodyBytes: 5)).count == 1)
    }

    @Test func theDefaultBodyLimitIsOneMebibyte() {
        let head = "POST / HTTP/1.1\r\nContent-Length: \((1 << 20) + 1)\r\n\r\n"
        #expect(decode(head) == [.error(.payloadTooLarge)])
    }

    @Test func headersOverTheLimitAreHeadersTooLarge() {
        let big = String(repeating: "a", count: 16 * 1024)
        #expect(decode("GET / HTTP/1.1\r\nX-Big: \(big)\r\n\r\n") == [.error(.headersTooLarge)])
        let many = (0..<3000).map { "X-\($0): v\r\n" }.joined()
        #expect(decode("GET / HTTP/1.1\r\n\(many)\r\n") == [.error(.headersTooLarge)])
    }

    @Test func aURLOverTheLimitIsURITooLong() {
        let long = String(repeating: "a", count: 8 * 1024)
        #expect(decode("GET /\(long) HTTP/1.1\r\n\r\n") == [.error(.uriTooLong)])
        #expect(decode("GET /\(long.dropFirst(2)) HTTP/1.1\r\n\r\n").count == 1)
    }

    @Test func limitErrorsAnswerTheirProtocolStatuses() {
        #expect(HTTPRequestError.payloadTooLarge.response.status.code == 413)
        #expect(HTTPRequestError.uriTooLong.response.status.code == 414)
        #expect(HTTPRequestError.headersTooLarge.response.status.code == 431)
        let body = String(decoding: HTTPRequestError.headersTooLarge.response.body, as: UTF8.self)
        #expect(body.contains(#""code":"headers_too_large""#) && body.contains(#""retryable":false"#))
    }

    @Test func progressTracksHeadAndBody() {
        var decoder = HTTPRequestDecoder(limits: HTTPLimits())
        #expect(decoder.progress == .idle)
        _ = Array("POST / HTTP/1.1\r\n".utf8).withUnsafeBytes { decoder.decode($0) }
        #expect(decoder.progress == .head)
        _ = Array("Content-Length: 3\r\n\r\nab".utf8).withUnsafeBytes { decoder.decode($0) }
        #expect(decoder.progress == .body)
        _ = Array("c".utf8).withUnsafeBytes { decoder.decode($0) }
        #expect(decoder.progress == .idle)
    }
}
