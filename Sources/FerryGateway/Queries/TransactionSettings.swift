import FerryPostgres

/// What every transaction the gateway sends sets for itself, transaction-locally: the
/// configured `statement_timeout` and `TimeZone` UTC (every time the API returns is UTC,
/// whatever the server, the database or the role sets).
///
/// Never start-up `options` (pgbouncer refuses the parameter) and never a session setting
/// (a transaction pooler hands the session to other clients between transactions). A
/// caller's request sets them in its identity statement, at no extra statement; the
/// gateway's own statements (sign-up, refresh, mail, the schema check, …) in
/// ``statement(timeout:)``, before them in the same pipeline. Either way the timeout is in
/// force from the next statement of the transaction on: PostgreSQL arms it afresh for each
/// statement of a pipeline.
enum TransactionSettings {
    /// The `set_config` calls, `$timeout` standing for the timeout's parameter.
    static func sql(timeout: String) -> String {
        """
        pg_catalog.set_config('statement_timeout', \(timeout), true),
            pg_catalog.set_config('TimeZone', 'UTC', true)
        """
    }

    /// The settings alone, before a statement of the gateway's own. Prepared once per connection.
    static func statement(timeout: String) -> PostgresStatement {
        PostgresStatement(statementSQL, [timeout], preparedName: statementName)
    }

    static let statementName = "ferry_settings"
    static let statementSQL = "select " + sql(timeout: "$1")
}

extension PostgresPool {
    /// The gateway's `statement_timeout` as `set_config` takes it: milliseconds, `0` for none.
    var statementTimeoutSetting: String { String(configuration.statementTimeoutMilliseconds ?? 0) }
}
