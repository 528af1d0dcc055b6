import Foundation

// Requests to a gateway over real HTTP, each on a fresh connection, for tests.

/// Asks `path` on a fresh connection.
public func get(_ path: String, port: Int) throws -> HTTPTestResponse {
    let client = try HTTPTestClient(port: port)
    defer { client.close() }
    try client.send("GET \(path) HTTP/1.1\r\nHost: test\r\n\r\n")
    return try client.readResponse()
}

/// A response with its body read as a JSON object (when it is one).
public struct APIResponse: Sendable {
    /// The response as read.
    public let raw: HTTPTestResponse

    /// Reads `raw`'s body as JSON on demand.
    public init(raw: HTTPTestResponse) { self.raw = raw }

    /// The status code.
    public var status: Int { raw.status }
    /// The first value of the header `name`.
    public func header(_ name: String) -> String? { raw.header(name) }

    /// The body as a JSON object, or nil.
    public var object: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(raw.body), options: [.fragmentsAllowed])) as? [String: Any]
    }

    /// The value at a path of object keys.
    public func value(_ path: String...) -> Any? {
        var current: Any? = object
        for key in path { current = (current as? [String: Any])?[key] }
        return current
    }

    /// The string at a path of object keys.
    public func string(_ path: String...) -> String? {
        var current: Any? = object
        for key in path { current = (current as? [String: Any])?[key] }
        return current as? String
    }

    /// `error.code` of a PROTOCOL error body.
    public var code: String? { string("error", "code") }
    /// `error.retryable` of a PROTOCOL error body.
    public var retryable: Bool? { value("error", "retryable") as? Bool }
    /// Whether `key` is present with a JSON null.
    public func isNull(_ path: String...) -> Bool {
        var current: Any? = object
        for key in path.dropLast() { current = (current as? [String: Any])?[key] }
        guard let last = path.last, let container = current as? [String: Any], let found = container[last] else {
            return false
        }
        return found is NSNull
    }
}

extension APIResponse: CustomStringConvertible {
    public var description: String { "\(status) \(raw.text)" }
}

/// Sends one request on a fresh connection and reads its answer. `json` is encoded
/// as the body, or `body` is sent as it is (as JSON); `source` is the client's address
/// (127.0.0.0/8); `proxyHeader` is sent first, as a proxy starts its connections
/// (``ProxyHeaders``).
public func call(
    _ method: String, _ path: String, port: Int, token: String? = nil, json: [String: Any]? = nil,
    body raw: [UInt8]? = nil, headers: [(String, String)] = [], source: String? = nil, proxyHeader: [UInt8]? = nil
) async throws -> APIResponse {
    var all = headers
    if let token { all.append(("Authorization", "Bearer \(token)")) }
    var body: [UInt8] = raw ?? []
    if let json { body = Array(try JSONSerialization.data(withJSONObject: json)) }
    if json != nil || raw != nil { all.append(("Content-Type", "application/json")) }
    let headers = all
    let bytes = body
    let raw = try await offload {
        let client = try HTTPTestClient(port: port, timeout: 15, source: source)
        defer { client.close() }
        if let proxyHeader { try client.send(proxyHeader) }
        return try client.request(method, path, headers: headers, body: bytes)
    }
    return APIResponse(raw: raw)
}
