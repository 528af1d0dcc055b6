import FerryTestSupport
import Testing

@testable import FerryHTTP

/// What the decoder asks at a request's head, without sockets: the head check sees the head
/// alone and its refusal stops the parser before the body, a bodiless request is not
/// checked, and the body budget is charged at the head and given back.
@Suite(.tagSelection) struct HeadAdmissionTests {
    private final class Checks {
        var seen: [String] = []
    }

    private static func admission(_ checks: Checks, budget: BodyBudget? = nil) -> HeadAdmission {
        HeadAdmission(
            headCheck: { _, path in
                guard path == "/private" else { return nil }
                return { request in
                    checks.seen.append("\(request.method) \(request.path) body=\(request.body.count)")
                    return request.headers["X-User"] == "good"
                        ? nil : .error(status: .unauthorized, code: "unauthorized", message: "no")
                }
            }, budget: budget, client: ClientAddress(IPAddress("127.0.0.1")!, port: 1))
    }

    private static func decode(_ text: String, _ admission: HeadAdmission) -> (
        consumed: Int, event: HTTPRequestDecoder.Event
    ) {
        var decoder = HTTPRequestDecoder(limits: HTTPLimits(), admission: admission)
        return Array(text.utf8).withUnsafeBytes { decoder.decode($0) }
    }

    @Test func aRefusedHeadStopsThePaserBeforeItsBody() {
        let checks = Checks()
        let head = "POST /private HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n"
        let (consumed, event) = Self.decode(head + "hello", Self.admission(checks))
        guard case .refused(let response) = event else {
            Issue.record("expected a refusal, got \(event)")
            return
        }
        #expect(response.status == .unauthorized)
        #expect(consumed <= head.utf8.count, "body bytes were consumed")
        #expect(checks.seen == ["POST /private body=0"])
    }

    @Test func anAdmittedHeadReadsItsBodyAndABodilessOneIsNotChecked() {
        let checks = Checks()
        let admitted = Self.decode(
            "POST /private HTTP/1.1\r\nX-User: good\r\nContent-Length: 5\r\n\r\nhello", Self.admission(checks))
        guard case .request(let request, _, _) = admitted.event else {
            Issue.record("expected a request, got \(admitted.event)")
            return
        }
        #expect(request.body == Array("hello".utf8))
        guard case .request = Self.decode("POST /private HTTP/1.1\r\n\r\n", Self.admission(checks)).event else {
            Issue.record("a bodiless request was refused at its head")
            return
        }
        guard
            case .refused = Self.decode(
                "POST /private HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", Self.admission(checks)
            ).event
        else {
            Issue.record("a chunked body was not checked")
            return
        }
        #expect(checks.seen.count == 2, "\(checks.seen)")
    }

    @Test func theBudgetIsChargedAtTheHeadAndGivenBack() {
        let budget = BodyBudget(limit: 10)
        let checks = Checks()
        let first = Self.decode(
            "POST /public HTTP/1.1\r\nContent-Length: 8\r\n\r\n12345678", Self.admission(checks, budget: budget))
        guard case .request(_, _, let charged) = first.event else {
            Issue.record("expected a request, got \(first.event)")
            return
        }
        #expect(charged == 8 && budget.used == 8)
        // 5 more would pass 10: refused at the head, nothing left charged for it.
        let second = Self.decode(
            "POST /public HTTP/1.1\r\nContent-Length: 5\r\n\r\n12345", Self.admission(checks, budget: budget))
        guard case .error(.bodyBufferFull) = second.event else {
            Issue.record("expected bodyBufferFull, got \(second.event)")
            return
        }
        #expect(HTTPRequestError.bodyBufferFull.response.headers["Retry-After"] == "1")
        #expect(budget.used == 8)
        budget.release(charged)
        #expect(budget.used == 0)
        guard
            case .request = Self.decode(
                "POST /public HTTP/1.1\r\nContent-Length: 5\r\n\r\n12345", Self.admission(checks, budget: budget)
            ).event
        else {
            Issue.record("a body within the budget was refused")
            return
        }
    }
}
