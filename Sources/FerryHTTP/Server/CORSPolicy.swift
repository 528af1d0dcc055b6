/// Which web pages may call the server from a browser (CORS, the Fetch standard): the
/// exact origins an operator allows (`https://app.example.org`), none by default.
///
/// For an allowed `Origin`, every answer carries `Access-Control-Allow-Origin` with that
/// origin (never `*`: requests carry a bearer token) and `Vary: Origin`, and a preflight
/// (`OPTIONS` with `Access-Control-Request-Method`) on a path the router knows is answered
/// `204` with the path's methods and the request headers the clients send. A preflight
/// from any other origin is `403 forbidden` without CORS headers, so the browser refuses
/// the call; a request without `Origin` (not a browser's cross-origin one) is served as
/// always. Matching is exact, byte for byte after ASCII lowercasing of scheme and host, as
/// browsers send them lowercased.
public struct CORSPolicy: Sendable, Equatable {
    /// The allowed origins, lowercased, without a trailing slash.
    public let origins: Set<String>
    /// The request headers a preflight allows.
    public static let allowedHeaders = "Authorization, Content-Type, Accept, Last-Event-ID"
    /// The response headers a page may read besides the CORS-safelisted ones.
    public static let exposedHeaders = "Retry-After"
    /// How long a browser may cache a preflight's answer, in seconds.
    public static let maxAgeSeconds = 600

    /// Nothing allowed.
    public static let none = CORSPolicy(origins: [])

    /// Allows exactly `origins`.
    public init(origins: Set<String>) {
        self.origins = Set(origins.map(Self.normalized))
    }

    /// Parses a comma-separated list of origins (`scheme://host[:port]`); empty allows none.
    public init(parsing list: String) throws(CORSPolicyError) {
        var origins: Set<String> = []
        for item in list.split(separator: ",") {
            let origin = item.trimmingASCIISpaces
            guard !origin.isEmpty else { continue }
            guard origin != "*" else { throw CORSPolicyError("'*' is not allowed: name each origin") }
            guard origin.hasPrefix("http://") || origin.hasPrefix("https://") else {
                throw CORSPolicyError(
                    "'\(origin)' is not an origin: expected http://host[:port] or https://host[:port]")
            }
            let rest = origin.drop(while: { $0 != "/" }).dropFirst(2)
            guard !rest.isEmpty, !rest.contains("/"), !rest.contains("?"), !rest.contains("#") else {
                throw CORSPolicyError("'\(origin)' is not an origin: no path, query or fragment, no trailing slash")
            }
            origins.insert(origin)
        }
        self.init(origins: origins)
    }

    /// Whether any origin is allowed.
    public var isEmpty: Bool { origins.isEmpty }

    /// The request's `Origin` when it is allowed, as the browser sent it.
    public func allowedOrigin(of request: HTTPRequest) -> String? {
        guard !origins.isEmpty, let origin = request.headers["Origin"] else { return nil }
        return origins.contains(Self.normalized(origin)) ? origin : nil
    }

    /// Adds the CORS headers of an answer to a request from `origin` (an allowed one).
    public static func decorate(_ response: inout HTTPResponse, origin: String) {
        response.headers.replaceOrAdd(name: "Access-Control-Allow-Origin", value: origin)
        response.headers.replaceOrAdd(name: "Access-Control-Expose-Headers", value: exposedHeaders)
        addVary(&response)
    }

    /// The headers ``decorate(_:origin:)`` adds, as head lines, for a head written by hand
    /// (an event stream's, which has no `Vary` of its own to merge with). `origin` is an
    /// allowed one (``allowedOrigin(of:)``): a configured origin but for case and trailing
    /// slashes, so it holds no line break.
    static func headLines(origin: String) -> String {
        "Access-Control-Allow-Origin: \(origin)\r\nAccess-Control-Expose-Headers: \(exposedHeaders)\r\nVary: Origin\r\n"
    }

    /// `Vary: Origin`, whatever the origin: a cache must not hand one origin's answer to another.
    static func addVary(_ response: inout HTTPResponse) {
        if let vary = response.headers["Vary"] {
            if !vary.lowercased().contains("origin") {
                response.headers.replaceOrAdd(name: "Vary", value: vary + ", Origin")
            }
        } else {
            response.headers.add(name: "Vary", value: "Origin")
        }
    }

    /// The answer to a preflight (`OPTIONS` with `Access-Control-Request-Method`) for a
    /// path whose routes take `methods`, nil when the request is not a preflight.
    func preflight(_ request: HTTPRequest, methods: [HTTPMethod]) -> HTTPResponse? {
        guard request.method == .options, request.headers.contains("Origin"),
            request.headers.contains("Access-Control-Request-Method")
        else { return nil }
        guard let origin = allowedOrigin(of: request) else {
            var refusal = HTTPResponse.error(
                status: .forbidden, code: "forbidden", message: "this origin is not allowed (FERRY_CORS_ORIGINS)")
            Self.addVary(&refusal)
            return refusal
        }
        var response = HTTPResponse(status: .noContent)
        response.headers.add(name: "Access-Control-Allow-Origin", value: origin)
        response.headers.add(
            name: "Access-Control-Allow-Methods", value: (methods + [.options]).map(\.name).joined(separator: ", "))
        response.headers.add(name: "Access-Control-Allow-Headers", value: Self.allowedHeaders)
        response.headers.add(name: "Access-Control-Max-Age", value: String(Self.maxAgeSeconds))
        Self.addVary(&response)
        return response
    }

    private static func normalized(_ origin: String) -> String {
        var origin = origin.lowercased()
        while origin.hasSuffix("/") { origin.removeLast() }
        return origin
    }
}

/// A `FERRY_CORS_ORIGINS` value that does not parse.
public struct CORSPolicyError: Error, CustomStringConvertible, Sendable {
    public let description: String
    init(_ description: String) { self.description = description }
}

extension Substring {
    fileprivate var trimmingASCIISpaces: String {
        String(drop(while: { $0 == " " || $0 == "\t" }).reversed().drop(while: { $0 == " " || $0 == "\t" }).reversed())
    }
}
