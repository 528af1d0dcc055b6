import FerryTestSupport
import Foundation
import Testing

@testable import FerryHTTP

private func encode(
    _ response: HTTPResponse, method: HTTPMethod? = .get, closes: Bool = false, isHTTP10: Bool = false
) -> String {
    var buffer: [UInt8] = []
    let context = HTTPConnectionStateMachine.ResponseContext(
        sequence: 0, method: method, route: nil, isHTTP10: isHTTP10, closesConnection: closes, receivedAt: 0)
    if HTTPResponseEncoder.encodeHead(response, context: context, date: HTTPDate(), now: 0, into: &buffer) {
        buffer += response.body
    }
    return String(decoding: buffer, as: UTF8.self)
}

/// The encoded response with its `Date` line taken out (it changes every second).
private func withoutDate(_ wire: String) -> String {
    wire.split(separator: "\r\n", omittingEmptySubsequences: false).filter { !$0.hasPrefix("Date: ") }
        .joined(separator: "\r\n")
}

@Suite(.tagSelection) struct HTTPResponseTests {
    @Test func errorBodyHasTheProtocolShape() throws {
        let response = HTTPResponse.error(status: .conflict, code: "lock_held", message: "held by \"ipad\"\n")
        #expect(response.status.code == 409)
        #expect(response.headers["content-type"] == "application/json")
        let object = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]
        let error = try #require(object?["error"] as? [String: Any])
        #expect(error["code"] as? String == "lock_held")
        #expect(error["message"] as? String == "held by \"ipad\"\n")
        #expect(error["retryable"] as? Bool == false)
        #expect(object?.count == 1 && error.count == 3)
    }

    @Test func onlyServerErrorsAndRateLimitsAreRetryable() {
        func retryable(_ status: HTTPStatus) -> Bool {
            String(decoding: HTTPResponse.error(status: status, code: "c", message: "m").body, as: UTF8.self)
                .contains(#""retryable":true"#)
        }
        #expect(retryable(.internalServerError) && retryable(.serviceUnavailable) && retryable(.tooManyRequests))
        #expect(!retryable(.badRequest) && !retryable(.notFound) && !retryable(.conflict))
    }

    @Test func jsonEncodesAValue() {
        struct Holder: Encodable { let holder: String }
        let response = HTTPResponse.json(status: .ok, Holder(holder: "d1"))
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"holder":"d1"}"#)
    }

    @Test func encodesStatusHeadersLengthAndBody() {
        let wire = encode(.text("ok"))
        #expect(
            withoutDate(wire)
                == "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n\r\nok")
        #expect(wire.contains("\r\nDate: "))
    }

    @Test func serverOwnedFieldsFromTheResponseAreDropped() {
        var response = HTTPResponse.text("ok")
        response.headers.add(name: "content-length", value: "99")
        response.headers.add(name: "Connection", value: "upgrade")
        #expect(!encode(response).contains("99") && !encode(response).contains("upgrade"))
    }

    @Test func headGetsTheGetHeadWithoutBody() {
        let wire = encode(.text("hello"), method: .head)
        #expect(wire.contains("Content-Length: 5\r\n") && wire.hasSuffix("\r\n\r\n"))
    }

    @Test func noContentHasNoLengthAndNoBody() {
        let wire = encode(HTTPResponse(status: .noContent, body: Array("x".utf8)))
        #expect(!wire.contains("Content-Length") && wire.hasSuffix("\r\n\r\n"))
        #expect(!encode(HTTPResponse(status: .notModified)).contains("Content-Length"))
    }

    @Test func closingAndHTTP10KeepAliveAreSaid() {
        #expect(encode(.text("ok"), closes: true).contains("Connection: close\r\n"))
        #expect(encode(.text("ok"), isHTTP10: true).contains("Connection: keep-alive\r\n"))
        #expect(!encode(.text("ok")).contains("Connection:"))
    }

    @Test func dateIsAnIMFFixdate() {
        var parts = tm()
        parts.tm_wday = 0
        parts.tm_mday = 6
        parts.tm_mon = 10
        parts.tm_year = 94
        parts.tm_hour = 8
        parts.tm_min = 49
        parts.tm_sec = 37
        #expect(String(decoding: HTTPDate.format(parts), as: UTF8.self) == "Sun, 06 Nov 1994 08:49:37 GMT")
        var buffer: [UInt8] = []
        HTTPDate().append(to: &buffer, now: 1)
        #expect(buffer.count == 29 && String(decoding: buffer, as: UTF8.self).hasSuffix(" GMT"))
    }
}
