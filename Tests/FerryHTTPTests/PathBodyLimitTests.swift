import FerryTestSupport
import Testing

@testable import FerryHTTP

/// `HTTPLimits.pathBodyLimits`: one path's body limit in place of the general one, known
/// when the head is complete, so a body over it is refused before it is buffered.
@Suite(.tagSelection) struct PathBodyLimitTests {
    let limits = HTTPLimits(
        maxBodyBytes: 4,
        pathBodyLimits: [PathBodyLimit(path: "/v1/big", maxBytes: 10, message: "over 10 (BIG_SETTING)")])

    func post(_ target: String, body: String) -> String {
        "POST \(target) HTTP/1.1\r\nHost: a\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
    }

    func chunked(_ target: String, body: String) -> String {
        "POST \(target) HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "\(String(body.utf8.count, radix: 16))\r\n\(body)\r\n0\r\n\r\n"
    }

    @Test func aPathWithItsOwnLimitTakesBodiesUpToItAndOthersKeepTheGeneralOne() {
        for target in ["/v1/big", "/v1/big?x=1", "//v1//big/", "/v1/big#f"] {
            #expect(decode(post(target, body: "0123456789"), limits: limits).count == 1, "\(target)")
            #expect(decode(chunked(target, body: "0123456789"), limits: limits).count == 1, "\(target)")
        }
        #expect(decode(post("/v1/small", body: "01234"), limits: limits) == [.error(.payloadTooLarge)])
        #expect(decode(post("/v1/bigger", body: "01234"), limits: limits) == [.error(.payloadTooLarge)])
        #expect(decode(post("/v1/big/more", body: "01234"), limits: limits) == [.error(.payloadTooLarge)])
        #expect(decode(post("/v1/b%69g", body: "01234"), limits: limits) == [.error(.payloadTooLarge)])
    }

    @Test func overItsLimitThePathIsRefusedWithItsOwnMessage() {
        let refused = HTTPRequestError.payloadTooLargeForPath(message: "over 10 (BIG_SETTING)")
        // Declared (refused from the head alone) and chunked (as the bytes come).
        #expect(decode(post("/v1/big", body: "0123456789a"), limits: limits) == [.error(refused)])
        #expect(decode(chunked("/v1/big", body: "0123456789a"), limits: limits) == [.error(refused)])
        let response = refused.response
        #expect(response.status.code == 413)
        #expect(
            String(decoding: response.body, as: UTF8.self)
                == #"{"error":{"code":"payload_too_large","message":"over 10 (BIG_SETTING)","retryable":false}}"#)
    }

    @Test func aRequestAfterOneToTheLimitedPathHasTheGeneralLimitAgain() {
        let both = post("/v1/big", body: "0123456789") + post("/v1/small", body: "01234")
        #expect(
            decode(both, limits: limits) == [
                .request(method: .post, path: "/v1/big", query: nil, body: "0123456789", keepAlive: true),
                .error(.payloadTooLarge),
            ])
    }
}
