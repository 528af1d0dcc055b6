/// One SQL statement with text parameters (`$1`, `$2`, …), sent with the extended protocol.
///
/// With a ``preparedName``, the statement is prepared once per connection under that
/// name (`PQsendPrepare`, in the same round trip as its first use) and executed by name
/// afterwards. One name must always mean the same SQL.
public struct PostgresStatement: Sendable, Equatable, ExpressibleByStringLiteral {
    /// The SQL, one statement.
    public var sql: String
    /// The parameters in text format; nil is SQL NULL. Types are inferred by the server.
    public var parameters: [String?]
    /// The name to prepare the statement under, or nil for an unnamed one-off statement.
    public var preparedName: String?

    /// A statement with parameters, optionally prepared under `preparedName`.
    public init(_ sql: String, _ parameters: [String?] = [], preparedName: String? = nil) {
        self.sql = sql
        self.parameters = parameters
        self.preparedName = preparedName
    }

    /// A statement without parameters.
    public init(stringLiteral sql: String) { self.init(sql) }
}

/// A `NOTIFY` received on a connection that `LISTEN`s.
public struct PostgresNotification: Sendable, Equatable {
    /// The channel name.
    public var channel: String
    /// The payload (empty when none was given).
    public var payload: String
    /// The process id of the backend that sent it.
    public var senderPID: Int32

    /// Creates a notification.
    public init(channel: String, payload: String, senderPID: Int32) {
        self.channel = channel
        self.payload = payload
        self.senderPID = senderPID
    }
}
