import FerryTestSupport
import Testing

@testable import FerryHTTP

/// The pattern a match found, its parameters, or what went wrong, comparable in `#expect`.
private enum Outcome: Equatable {
    case found(String, [String: String])
    case methodNotAllowed([HTTPMethod])
    case notFound
    case undecodable(String, pattern: String)
}

private func outcome(_ router: Router, _ method: HTTPMethod, _ path: String) -> Outcome {
    switch router.match(method: method, path: path) {
    case .found(_, let parameters, let pattern): .found(pattern, parameters)
    case .methodNotAllowed(let allowed): .methodNotAllowed(allowed)
    case .notFound: .notFound
    case .undecodable(let parameter, let pattern): .undecodable(parameter, pattern: pattern)
    }
}

private func router(_ routes: [(HTTPMethod, String)]) -> Router {
    var router = Router()
    for (method, pattern) in routes { router.add(method, pattern) { _, _ in } }
    return router
}

@Suite(.tagSelection) struct RouterTests {
    @Test func matchesExactPaths() {
        let routes = router([(.get, "/healthz"), (.get, "/readyz"), (.post, "/v1/push")])
        #expect(outcome(routes, .get, "/healthz") == .found("/healthz", [:]))
        #expect(outcome(routes, .post, "/v1/push") == .found("/v1/push", [:]))
        #expect(outcome(routes, .get, "/v1") == .notFound)
        #expect(outcome(routes, .get, "/nope") == .notFound)
        #expect(outcome(routes, .get, "/healthz/extra") == .notFound)
    }

    @Test func capturesParametersPercentDecoded() {
        let routes = router([(.post, "/v1/locks/:table/:key/claim")])
        #expect(
            outcome(routes, .post, "/v1/locks/active_game/a%2Fb/claim")
                == .found("/v1/locks/:table/:key/claim", ["table": "active_game", "key": "a/b"]))
    }

    @Test(arguments: ["cur%00rent", "cur%zzrent", "cur%ffrent", "%", "%c3", "%ed%a0%80"])
    func aParameterThatDoesNotDecodeIsUndecodable(key: String) {
        let routes = router([(.post, "/v1/locks/:table/:key/claim")])
        #expect(
            outcome(routes, .post, "/v1/locks/active_game/\(key)/claim")
                == .undecodable("key", pattern: "/v1/locks/:table/:key/claim"))
    }

    @Test func aPlusInAPathIsAPlusAndLiteralSegmentsMatchAsSent() {
        let routes = router([(.post, "/v1/locks/:table/:key/claim"), (.get, "/v1/pull")])
        #expect(
            outcome(routes, .post, "/v1/locks/a/b+c%20d/claim")
                == .found("/v1/locks/:table/:key/claim", ["table": "a", "key": "b+c d"]))
        #expect(outcome(routes, .get, "/v1/p%75ll") == .notFound)
    }

    @Test func exactSegmentsWinOverParameters() {
        let routes = router([(.get, "/v1/:thing"), (.get, "/v1/schema")])
        #expect(outcome(routes, .get, "/v1/schema") == .found("/v1/schema", [:]))
        #expect(outcome(routes, .get, "/v1/other") == .found("/v1/:thing", ["thing": "other"]))
    }

    @Test func fallsBackToAParameterWhenTheExactBranchLeadsNowhere() {
        let routes = router([(.get, "/a/:x/c"), (.get, "/a/b/d")])
        #expect(outcome(routes, .get, "/a/b/c") == .found("/a/:x/c", ["x": "b"]))
        #expect(outcome(routes, .get, "/a/b/d") == .found("/a/b/d", [:]))
    }

    @Test func wrongMethodListsTheAllowedOnes() {
        let routes = router([(.get, "/v1/pull"), (.delete, "/v1/pull")])
        #expect(outcome(routes, .post, "/v1/pull") == .methodNotAllowed([.get, .delete, .head]))
    }

    @Test func headIsServedByGet() {
        let routes = router([(.get, "/healthz")])
        #expect(outcome(routes, .head, "/healthz") == .found("/healthz", [:]))
    }

    @Test func emptySegmentsAndTheRootAreHandled() {
        let routes = router([(.get, "/"), (.get, "/healthz")])
        #expect(outcome(routes, .get, "/") == .found("/", [:]))
        #expect(outcome(routes, .get, "/healthz/") == .found("/healthz", [:]))
        #expect(outcome(router([(.get, "/healthz")]), .get, "/") == .notFound)
    }
}
