import Glibc

/// A request handler: runs on the connection's loop and answers through `responder`,
/// at once or later (after a database query), exactly once.
public typealias HTTPHandler = (HTTPRequest, HTTPResponder) -> Void

/// A route's check of a request's head, run once the head is complete and before a byte
/// of its body is read (the request it gets has no body and no path parameters): a
/// response refuses the request (it is the answer, no `100 Continue` is sent and the
/// connection closes after it), nil lets the body be read. It runs on the connection's
/// loop and must answer at once. The handler still runs its own checks on the whole
/// request: a head check only decides whether the body is worth reading.
public typealias HeadCheck = (HTTPRequest) -> HTTPResponse?

/// Maps method and path to a handler.
///
/// Patterns are `/`-separated segments; a segment `:name` matches any one segment and
/// captures it (percent-decoded) as a path parameter: `/v1/locks/:table/:key/claim`.
/// Other segments match the path's bytes as sent (`/v1/p%75ll` is not `/v1/pull`); `+`
/// in a path is a plus.
/// An exact segment is preferred over a parameter at the same place, falling back to
/// the parameter when the exact branch leads nowhere. Empty segments are ignored, so
/// `/healthz/` matches `/healthz`. `HEAD` is served by the `GET` handler when no
/// `HEAD` route exists (the server drops the body).
///
/// Routes that share a first step (a user must be known) are added through
/// ``group(gate:_:)``: their handlers receive what the gate found, and the gate is also
/// their head check (``HeadCheck``), so a request the gate refuses has none of its body read.
///
/// Built once per loop before serving (see ``HTTPServer``); matching allocates only
/// for captured parameters.
public struct Router {
    /// One node per distinct path prefix; `nodes[0]` is the root.
    private var nodes: [Node] = [Node()]

    private struct Node {
        var literals: [(segment: [UInt8], node: Int)] = []
        var parameter: (name: String, node: Int)?
        var routes: [Route] = []
    }

    private struct Route {
        var method: HTTPMethod
        var handler: HTTPHandler
        var pattern: String
        var headCheck: HeadCheck?
    }

    /// What ``match(method:path:)`` found.
    public enum Match {
        /// A handler for this method and path, the path parameters, and the route's pattern
        /// (a low-cardinality label for metrics).
        case found(HTTPHandler, parameters: [String: String], pattern: String)
        /// The path exists but not for this method; `allowed` lists the methods it has.
        case methodNotAllowed(allowed: [HTTPMethod])
        /// No route has this path.
        case notFound
        /// A route has this path and method, but its path parameter `parameter` does not
        /// percent-decode to text (a malformed escape, not UTF-8, a NUL): `400
        /// invalid_request`. `pattern` is the route's, as in ``found(_:parameters:pattern:)``.
        case undecodable(parameter: String, pattern: String)
    }

    /// An empty router.
    public init() {}

    // MARK: - Registration

    /// Serves `method` requests whose path matches `pattern` with `handler`; a request that
    /// sends a body (or asks for `100 Continue`) passes `headCheck` first, if given.
    ///
    /// Registering the same method and pattern twice is a programming error (traps).
    public mutating func add(
        _ method: HTTPMethod, _ pattern: String, headCheck: HeadCheck? = nil, _ handler: @escaping HTTPHandler
    ) {
        var current = 0
        for segment in pattern.split(separator: "/") {
            if segment.first == ":" {
                let name = String(segment.dropFirst())
                precondition(!name.isEmpty, "a path parameter needs a name: \(pattern)")
                if let existing = nodes[current].parameter {
                    precondition(existing.name == name, "two parameter names at one place: \(pattern)")
                    current = existing.node
                } else {
                    nodes.append(Node())
                    nodes[current].parameter = (name, nodes.count - 1)
                    current = nodes.count - 1
                }
            } else if let existing = nodes[current].literals.first(where: { $0.segment.elementsEqual(segment.utf8) }) {
                current = existing.node
            } else {
                nodes.append(Node())
                nodes[current].literals.append((Array(segment.utf8), nodes.count - 1))
                current = nodes.count - 1
            }
        }
        precondition(
            !nodes[current].routes.contains { $0.method == method }, "route registered twice: \(method) \(pattern)")
        nodes[current].routes.append(Route(method: method, handler: handler, pattern: pattern, headCheck: headCheck))
    }

    /// Serves `GET` (and `HEAD`) requests for `pattern`.
    public mutating func get(_ pattern: String, _ handler: @escaping HTTPHandler) { add(.get, pattern, handler) }
    /// Serves `POST` requests for `pattern`.
    public mutating func post(_ pattern: String, _ handler: @escaping HTTPHandler) { add(.post, pattern, handler) }
    /// Serves `PUT` requests for `pattern`.
    public mutating func put(_ pattern: String, _ handler: @escaping HTTPHandler) { add(.put, pattern, handler) }
    /// Serves `PATCH` requests for `pattern`.
    public mutating func patch(_ pattern: String, _ handler: @escaping HTTPHandler) { add(.patch, pattern, handler) }
    /// Serves `DELETE` requests for `pattern`.
    public mutating func delete(_ pattern: String, _ handler: @escaping HTTPHandler) { add(.delete, pattern, handler) }

    // MARK: - Matching

    /// The head check of the route `method` and `path` reach, nil when none does or it has
    /// none (the server then reads the body and lets the handler answer).
    public func headCheck(method: HTTPMethod, path: String) -> HeadCheck? {
        var path = path
        return path.withUTF8 { bytes in
            var captured: [(name: String, start: Int, end: Int)] = []
            guard let node = find(from: 0, in: bytes, at: 0, captured: &captured) else { return nil }
            return Self.route(for: method, in: nodes[node].routes)?.headCheck
        }
    }

    /// The route for `method` among a path's routes: `HEAD` falls back to `GET`.
    private static func route(for method: HTTPMethod, in routes: [Route]) -> Route? {
        routes.first(where: { $0.method == method })
            ?? (method == .head ? routes.first(where: { $0.method == .get }) : nil)
    }

    /// Finds the handler for `method` and `path` (the path without its query string).
    public func match(method: HTTPMethod, path: String) -> Match {
        var path = path
        return path.withUTF8 { bytes in
            var captured: [(name: String, start: Int, end: Int)] = []
            guard let node = find(from: 0, in: bytes, at: 0, captured: &captured) else { return .notFound }
            let routes = nodes[node].routes
            guard let route = Self.route(for: method, in: routes) else {
                var allowed = routes.map(\.method)
                if allowed.contains(.get) && !allowed.contains(.head) { allowed.append(.head) }
                return .methodNotAllowed(allowed: allowed)
            }
            var parameters: [String: String] = [:]
            if !captured.isEmpty {
                parameters.reserveCapacity(captured.count)
                for capture in captured {
                    let raw = UnsafeBufferPointer(rebasing: bytes[capture.start..<capture.end])
                    guard let value = PercentDecoding.decode(raw, plusIsSpace: false) else {
                        return .undecodable(parameter: capture.name, pattern: route.pattern)
                    }
                    parameters[capture.name] = value
                }
            }
            return .found(route.handler, parameters: parameters, pattern: route.pattern)
        }
    }

    /// Depth-first search, exact segments first; returns the node of a registered route.
    private func find(
        from node: Int, in path: UnsafeBufferPointer<UInt8>, at start: Int,
        captured: inout [(name: String, start: Int, end: Int)]
    ) -> Int? {
        var start = start
        while start < path.count && path[start] == UInt8(ascii: "/") { start += 1 }
        if start == path.count { return nodes[node].routes.isEmpty ? nil : node }
        var end = start
        while end < path.count && path[end] != UInt8(ascii: "/") { end += 1 }
        let segment = UnsafeBufferPointer(rebasing: path[start..<end])
        for literal in nodes[node].literals where Self.equal(literal.segment, segment) {
            if let found = find(from: literal.node, in: path, at: end, captured: &captured) { return found }
        }
        if let parameter = nodes[node].parameter {
            captured.append((parameter.name, start, end))
            if let found = find(from: parameter.node, in: path, at: end, captured: &captured) { return found }
            captured.removeLast()
        }
        return nil
    }

    private static func equal(_ literal: [UInt8], _ segment: UnsafeBufferPointer<UInt8>) -> Bool {
        literal.count == segment.count
            && literal.withUnsafeBufferPointer { memcmp($0.baseAddress!, segment.baseAddress!, segment.count) == 0 }
    }
}
