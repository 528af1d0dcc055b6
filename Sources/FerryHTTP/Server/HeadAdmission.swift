/// What a connection consults once a request's head is complete, before it reads a byte
/// of the body: the route's head check (``Router/headCheck(method:path:)``) and the
/// server's ``BodyBudget``.
///
/// So a body is read only for a request that may send one: one a route's gate refuses
/// (a missing or bad token) is answered at its head, with no `100 Continue` and none of
/// its body buffered, and so is one the budget cannot take. Both refusals close the
/// connection after the answer: the unread body would otherwise be read as the next
/// request.
struct HeadAdmission {
    /// The head check of the route a method and path reach, nil when it has none.
    var headCheck: ((HTTPMethod, String) -> HeadCheck?)?
    /// The bound on body bytes held over every connection, nil for none.
    var budget: BodyBudget?
    /// Whom the connection speaks for: its TCP peer, or the client a trusted proxy's
    /// PROXY header named; every request's ``HTTPRequest/remoteAddress`` unless it is a
    /// trusted proxy's and the request's `X-Forwarded-For` names another.
    var client: ClientAddress?
    /// The proxies whose PROXY header is required and believed, and whose
    /// `X-Forwarded-For` is read.
    var trustedProxies = TrustedProxies.none

    /// Admits every head and charges nothing (the state machine's tests).
    static var none: HeadAdmission { HeadAdmission() }
}
