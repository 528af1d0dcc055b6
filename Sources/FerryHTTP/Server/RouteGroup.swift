/// A handler of a ``RouteGroup``: like ``HTTPHandler``, with what the group's gate
/// yielded for the request (for example the authenticated caller).
public typealias GroupHandler<Context> = (HTTPRequest, Context, HTTPResponder) -> Void

/// What a ``RouteGroup``'s gate decides about one request.
public enum Admission<Context> {
    /// The request goes on to its handler, with `Context`.
    case admitted(Context)
    /// The request is answered with this response; no handler runs.
    case refused(HTTPResponse)
}

/// Routes that share a first step, said once: the gate runs before every handler of the
/// group and either hands it what it found (``Admission/admitted(_:)``) or answers the
/// request itself (``Admission/refused(_:)``). It is also each route's ``HeadCheck``: a
/// request that sends a body meets the gate when its head is complete, with no body yet,
/// and a refusal then is the answer before any of the body is read (and the connection
/// closes); the gate runs again on the whole request before the handler, since time has
/// passed (a token may have expired while the body arrived). So a gate must decide from
/// the head alone, and cheaply. Hummingbird's `RouterGroup` with a
/// middleware, for "these routes need a user": the HTTP layer knows nothing of what the
/// gate checks, only that its handlers receive the gate's `Context`.
///
/// Made by ``Router/group(gate:_:)``; its routes are the router's, matched as any other.
public struct RouteGroup<Context> {
    fileprivate var router: Router
    private let gate: (HTTPRequest) -> Admission<Context>

    fileprivate init(router: Router, gate: @escaping (HTTPRequest) -> Admission<Context>) {
        self.router = router
        self.gate = gate
    }

    /// Serves `method` requests whose path matches `pattern` with `handler`, once the
    /// gate admits them.
    public mutating func add(_ method: HTTPMethod, _ pattern: String, _ handler: @escaping GroupHandler<Context>) {
        let gate = self.gate
        let headCheck: HeadCheck = { request in
            if case .refused(let response) = gate(request) { response } else { nil }
        }
        router.add(method, pattern, headCheck: headCheck) { request, responder in
            switch gate(request) {
            case .admitted(let context): handler(request, context, responder)
            case .refused(let response): responder.respond(response)
            }
        }
    }

    /// Serves `GET` (and `HEAD`) requests for `pattern`.
    public mutating func get(_ pattern: String, _ handler: @escaping GroupHandler<Context>) {
        add(.get, pattern, handler)
    }
    /// Serves `POST` requests for `pattern`.
    public mutating func post(_ pattern: String, _ handler: @escaping GroupHandler<Context>) {
        add(.post, pattern, handler)
    }
    /// Serves `PUT` requests for `pattern`.
    public mutating func put(_ pattern: String, _ handler: @escaping GroupHandler<Context>) {
        add(.put, pattern, handler)
    }
    /// Serves `PATCH` requests for `pattern`.
    public mutating func patch(_ pattern: String, _ handler: @escaping GroupHandler<Context>) {
        add(.patch, pattern, handler)
    }
    /// Serves `DELETE` requests for `pattern`.
    public mutating func delete(_ pattern: String, _ handler: @escaping GroupHandler<Context>) {
        add(.delete, pattern, handler)
    }
}

extension Router {
    /// Adds the routes `body` registers on a ``RouteGroup`` whose every request passes
    /// `gate` first: `router.group(gate: accounts.callers) { routes in routes.get(…) { request, caller, responder in … } }`.
    public mutating func group<Context>(
        gate: @escaping (HTTPRequest) -> Admission<Context>, _ body: (inout RouteGroup<Context>) -> Void
    ) {
        var group = RouteGroup(router: self, gate: gate)
        self = Router()  // the group holds the only reference meanwhile, so adding copies nothing
        body(&group)
        self = group.router
    }
}
