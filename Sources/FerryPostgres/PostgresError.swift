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
        /// The SQL or a text parameter holds a NUL byte, which PostgreSQL text cannot hold
        /// and libpq (taking C strings) would silently cut the text at; nothing was sent.
        case unsendableText
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

    /// What a failure says about the work that failed: whether the same work may
    /// succeed if run again, or what must change first.
    public enum Cause: Sendable, Equatable {
        /// Running the same work again, on another connection, may succeed.
        case transient
        /// The work's own data: a value that does not convert to or fit its type, or that
        /// goes past one of the server's limits (an index entry too large, too many columns).
        case invalidData
        /// The work's data conflicts with stored data or a rule of the schema (a unique,
        /// foreign-key, check or not-null constraint).
        case conflict
        /// The server or its schema: a missing object or privilege, a bug in a function,
        /// a configuration the client cannot change.
        case server
    }

    /// The cause, from the kind and, for a server error, the SQLSTATE's class (the
    /// first two characters; PostgreSQL's "Errcodes" appendix):
    ///
    /// - transient: a lost, failed or timed-out connection, a full pool; `08`
    ///   connection exception, `40` transaction rollback (serialization failure,
    ///   deadlock) but `40002`, `53` insufficient resources (disk full, out of memory,
    ///   too many connections), `57` operator intervention (`57014` statement timeout
    ///   or cancel, `57P01` `pg_terminate_backend` or shutdown, crash, cannot connect
    ///   now), `55P03` lock not available (`lock_timeout`), `25006` read-only
    ///   transaction (a standby, mid-failover).
    /// - invalidData: `22` data exception, `54` program limit exceeded; text with a NUL
    ///   byte, refused before it is sent (the server would answer `22021`).
    /// - conflict: `23` integrity constraint violation, `40002` (the same, at commit).
    /// - server: every other class (`0A` feature not supported, `42` syntax error or
    ///   access rule violation, `P0` PL/pgSQL error, `XX` internal error, …), a closed
    ///   pool or connection, a bad configuration, an unsupported answer.
    public var cause: Cause {
        switch kind {
        case .connectionFailed, .connectionLost, .timeout, .poolExhausted: return .transient
        case .unsendableText: return .invalidData
        case .poolClosed, .closed, .invalidConfiguration, .unsupported: return .server
        case .server: break
        }
        guard let sqlState, sqlState.utf8.count == 5 else { return .server }
        switch sqlState {
        case SQLState.transactionIntegrityConstraintViolation: return .conflict
        case SQLState.lockNotAvailable, SQLState.readOnlySQLTransaction: return .transient
        default: break
        }
        switch String(sqlState.prefix(2)) {
        case SQLState.Class.connectionException, SQLState.Class.transactionRollback,
            SQLState.Class.insufficientResources, SQLState.Class.operatorIntervention:
            return .transient
        case SQLState.Class.dataException, SQLState.Class.programLimitExceeded: return .invalidData
        case SQLState.Class.integrityConstraintViolation: return .conflict
        default: return .server
        }
    }

    /// Whether running the same work again, on another connection, may succeed
    /// (``cause`` is ``Cause/transient``).
    public var isRetryable: Bool { cause == .transient }

    /// Whether the server ends the session after this error (severity `FATAL` or `PANIC`).
    public var endsSession: Bool { severity == "FATAL" || severity == "PANIC" }

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
