/// An error answer of the gateway: `{"error": {"code", "message", "retryable"}}` and its status.
public struct ServerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The HTTP status.
    public var status: Int
    /// The protocol's error code (`token_expired`, `lock_held`, …); ``errorCode`` is it typed.
    public var code: String
    /// The server's human text.
    public var message: String
    /// Whether sending the same request later may succeed: the client's retry policy
    /// of the status and the body's `retryable`.
    public var retryable: Bool
    /// The whole error object, for the fields some codes add (`holder`, `device_rows`, …).
    public var details: FerryRow
    /// `Retry-After`, in seconds, when the answer had one.
    public var retryAfter: Double?

    /// A description for logs: `409 lock_held: …`.
    public var description: String { "\(status) \(code): \(message)" }
}
