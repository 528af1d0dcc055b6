import Testing

@testable import FerryHTTP

@Suite struct HTTPRequestTests {
    @Test func queryParametersArePercentDecoded() {
        let request = HTTPRequest(method: .get, path: "/v1/pull", query: "cursor=a%2Fb%3D&limit=10&q=x+y&flag")
        #expect(request.queryParameter("cursor") == "a/b=")
        #expect(request.queryParameter("limit") == "10")
        #expect(request.queryParameter("q") == "x y")
        #expect(request.queryParameter("flag") == "")
        #expect(request.queryParameter("missing") == nil)
    }

    @Test func aMalformedEscapeIsNoValue() {
        #expect(HTTPRequest(method: .get, path: "/", query: "a=%zz").queryParameter("a") == nil)
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
