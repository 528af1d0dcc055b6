import CLibPQ
import Foundation

/// Where and how to connect to PostgreSQL: a `postgresql://` URL or a libpq conninfo
/// string, plus the parameters Ferry sets on every connection.
///
/// The connection string is handed to libpq as is (`expand_dbname`), so every libpq
/// parameter works (`sslmode`, `host=/var/run/postgresql`, …). The fields below are
/// passed after it and win over the same settings in the string.
public struct PostgresConfiguration: Sendable, Equatable {
    /// The `postgresql://…` URL or `key=value` conninfo string.
    public var connectionString: String
    /// Overrides the database named in ``connectionString`` when set.
    public var database: String?
    /// Reported to the server as `application_name` (visible in `pg_stat_activity`).
    public var applicationName: String
    /// How long a connection attempt may take, in milliseconds, before it fails.
    public var connectTimeoutMilliseconds: Int
    /// The server-side `statement_timeout` in milliseconds that the owner's statements set
    /// per transaction (the gateway's identity statement does), never at start-up: a pooler
    /// such as pgbouncer refuses the start-up `options` parameter, and in transaction mode
    /// a session setting would reach other clients' transactions. It also bounds
    /// ``operationTimeoutMilliseconds`` by default. Nil: no timeout of Ferry's.
    public var statementTimeoutMilliseconds: Int?
    /// The client-side deadline of one operation in milliseconds, a safety net behind
    /// `statement_timeout`: when it passes, the operation fails with ``PostgresError/Kind/timeout``
    /// and the connection is closed (libpq 15 has no non-blocking cancel). Nil means no deadline.
    public var operationTimeoutMilliseconds: Int?
    /// Whether statements with a ``PostgresStatement/preparedName`` are prepared under it,
    /// once per connection. When false every statement is sent unnamed
    /// (`PQsendQueryParams`: parsed and planned each time), for a pooler in transaction
    /// mode, where one server connection serves many clients and a named statement one of
    /// them prepared is missing, or already there, for the next.
    public var preparesStatements = true
    /// Seconds of idleness before TCP keepalive probes start, so a silently dead peer is noticed.
    public var keepaliveIdleSeconds: Int

    /// Reads a `postgresql://` / `postgres://` URL or a conninfo string.
    ///
    /// Throws ``PostgresError`` (``PostgresError/Kind/invalidConfiguration``) when libpq
    /// cannot parse it.
    public init(
        _ connectionString: String, applicationName: String = "ferry", connectTimeoutMilliseconds: Int = 10_000,
        statementTimeoutMilliseconds: Int? = nil, operationTimeoutMilliseconds: Int? = nil
    ) throws(PostgresError) {
        var message: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(connectionString, &message) else {
            let text = message.map { String(cString: $0) } ?? "out of memory"
            if let message { PQfreemem(message) }
            throw PostgresError(
                .invalidConfiguration,
                "invalid PostgreSQL connection string: \(text.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        PQconninfoFree(options)
        self.connectionString = connectionString
        self.applicationName = applicationName
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.statementTimeoutMilliseconds = statementTimeoutMilliseconds
        self.operationTimeoutMilliseconds =
            operationTimeoutMilliseconds ?? statementTimeoutMilliseconds.map { $0 + 5_000 }
        self.keepaliveIdleSeconds = 30
    }

    /// The same configuration pointed at another database on the same server.
    public func database(_ name: String) -> PostgresConfiguration {
        var copy = self
        copy.database = name
        return copy
    }

    /// The connection parameters as libpq reads them (`host`, `port`, `dbname`, …),
    /// after ``database`` is applied. Useful to log where Ferry connects (no password).
    public var parameters: [String: String] {
        guard let options = PQconninfoParse(connectionString, nil) else { return [:] }
        defer { PQconninfoFree(options) }
        var result: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { result[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
        if let database { result["dbname"] = database }
        result["password"] = nil
        return result
    }

    /// The keyword/value pairs given to `PQconnectStartParams`; the first is the
    /// connection string itself, expanded by libpq.
    package var startupParameters: [(String, String)] {
        var pairs: [(String, String)] = [("dbname", connectionString)]
        if let database { pairs.append(("dbname", database)) }
        pairs.append(("application_name", applicationName))
        pairs.append(("keepalives", "1"))
        pairs.append(("keepalives_idle", String(keepaliveIdleSeconds)))
        pairs.append(("keepalives_interval", "10"))
        pairs.append(("keepalives_count", "3"))
        return pairs
    }
}
