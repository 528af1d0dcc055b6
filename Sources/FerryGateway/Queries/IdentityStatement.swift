import FerryAuth
import FerryPostgres

extension Identity {
    /// Switches a transaction to the request role, sets who is asking and the gateway's
    /// ``TransactionSettings``, all transaction-locally and in one statement. Prepared once
    /// per connection.
    static let statementName = "ferry_identity"
    static let statementSQL = """
        select pg_catalog.set_config('role', 'ferry_client', true),
            pg_catalog.set_config('ferry.user_id', $1, true),
            pg_catalog.set_config('ferry.device_id', $2, true),
            pg_catalog.set_config('ferry.session_id', $3, true),
            \(TransactionSettings.sql(timeout: "$4"))
        """

    /// The identity statement for this caller, with `statement_timeout` `timeout`
    /// (``PostgresPool/statementTimeoutSetting``).
    func statement(timeout: String) -> PostgresStatement {
        PostgresStatement(
            Self.statementSQL, [userID, deviceID, sessionID, timeout], preparedName: Self.statementName)
    }
}
