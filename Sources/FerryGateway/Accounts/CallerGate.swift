import FerryAuth
import FerryHTTP

extension Accounts {
    /// The gate of the routes that need a caller (``Router/group(gate:_:)``): the
    /// request's ``Identity`` from its bearer token, or its `401` (`unauthorized`,
    /// `token_expired`, `session_revoked`). Costs no round trip.
    var callers: (HTTPRequest) -> Admission<Identity> {
        { [self] request in Self.admission(authenticate(request)) }
    }

    /// ``callers``, but a revoked session is let through: for account deletion, whose
    /// retry after a lost answer carries a token of the session the deletion revoked
    /// (the database, not the cache, decides then).
    var callersOfRevokedSessionsToo: (HTTPRequest) -> Admission<Identity> {
        { [self] request in Self.admission(authenticate(request, checkRevocation: false)) }
    }

    /// The gate of the stream routes: the token's claims, from the `Authorization` header
    /// or `?access_token=` (a browser's `EventSource` and `WebSocket` cannot set headers).
    var streamCallers: (HTTPRequest) -> Admission<AccessTokenClaims> {
        { [self] request in Self.admission(streamClaims(request)) }
    }

    /// The user of `request`'s anonymous session, for a route open to anyone that cares
    /// (sign-in): nil without an `Authorization` header or for a caller with an email; a
    /// token that does not verify is refused as on every route.
    func anonymousUser(of request: HTTPRequest) -> Result<String?, APIError> {
        guard request.headers["Authorization"] != nil else { return .success(nil) }
        return authenticate(request).map { $0.isAnonymous ? $0.userID : nil }
    }

    private static func admission<Value>(_ result: Result<Value, APIError>) -> Admission<Value> {
        switch result {
        case .success(let value): .admitted(value)
        case .failure(let error): .refused(error.response)
        }
    }
}
