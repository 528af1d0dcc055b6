/// A failure talking to PostgreSQL: the connection, the server, a deadline or the pool.
public struct PostgresError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, coarsely; ``sqlState`` refines ``Kind/server``.
    public enum Kind: Sendable, Equatable {
        /// The connection could not be opened (refused, authentication, unknown database, connect timeout).
        case connectionFailed
        /// The connection broke while in use, or had already broken.
        case connectionLost
        /// The server answered with an error; see ``PostgresError/sqlState``.
        case server
        /// A client-side deadline passed (the operation's, or a pool wait).
        case timeout
        /// The pool's wait queue is full, or a waiter timed out.
        case poolExhausted
        /// The pool was closed.
        case poolClosed
        /// The connection was closed by its owner.
        case closed
        /// The configuration could not be parsed.
        case invalidConfiguration
        /// The server sent something this client does not handle (e.g. `COPY`).
        case unsupported
    }

    /// What went wrong.
    public var kind: Kind
    /// The message (the server's primary message for ``Kind/server``).
    public var message: String
    /// The five-character SQLSTATE code of a server error (`23505`, `40001`, …).
    public var sqlState: String?
    /// The server's DETAIL, if any.
    public var detail: String?
    /// The server's HINT, if any.
    public var hint: String?
    /// The server's non-localized severity (`ERROR`, `FATAL`, `PANIC`).
    public var severity: String?

    /// Creates an error.
    public init(
        _ kind: Kind, _ message: String, sqlState: String? = nil, detail: String? = nil, hint: String? = nil,
        severity: String? = nil
    ) {
        self.kind = kind
        self.message = message
        self.sqlState = sqlState
        self.detail = detail
        self.hint = hint
        self.severity = severity
    }

    /// Whether running the same work again, on another connection, may succeed.
    ///
    /// True for lost or failed connections, client-side timeouts, a full pool, and the
    /// server errors `40001` (serialization failure), `40P01` (deadlock), `57P01`
    /// (admin shutdown, e.g. `pg_terminate_backend`), `57P02`/`57P03` (crash shutdown,
    /// cannot connect now). A server `statement_timeout` (`57014`) is not: the same
    /// statement would most likely run out of time again.
    public var isRetryable: Bool {
        switch kind {
        case .connectionFailed, .connectionLost, .timeout, .poolExhausted: return true
        case .server: return sqlState.map(Self.retryableStates.contains) ?? false
        case .poolClosed, .closed, .invalidConfiguration, .unsupported: return false
        }
    }

    /// Whether the server ends the session after this error (severity `FATAL` or `PANIC`).
    public var endsSession: Bool { severity == "FATAL" || severity == "PANIC" }

    private static let retryableStates: Set<String> = ["40001", "40P01", "57P01", "57P02", "57P03"]

    /// A one-line summary with the SQLSTATE, detail and hint when present.
    public var description: String {
        var text = "PostgreSQL \(kind)"
        if let sqlState { text += " \(sqlState)" }
        text += ": \(message)"
        if let detail { text += " (detail: \(detail))" }
        if let hint { text += " (hint: \(hint))" }
        return text
    }
}
