/// The SQLSTATE codes Ferry acts on by name (PostgreSQL's "Errcodes" appendix), each
/// spelled once; ``PostgresError/cause`` sorts every other code by its class.
public enum SQLState {
    /// `22023` invalid_parameter_value: what `raise` uses for a bad argument.
    public static let invalidParameterValue = "22023"
    /// `22P02` invalid_text_representation: text that does not convert to its type.
    public static let invalidTextRepresentation = "22P02"
    /// `25006` read_only_sql_transaction: a standby, or a primary mid-failover.
    public static let readOnlySQLTransaction = "25006"
    /// `3F000` invalid_schema_name.
    public static let invalidSchemaName = "3F000"
    /// `40002` transaction_integrity_constraint_violation: a deferred constraint at commit.
    public static let transactionIntegrityConstraintViolation = "40002"
    /// `40P01` deadlock_detected: the server rolled back one transaction of a cycle.
    public static let deadlockDetected = "40P01"
    /// `42501` insufficient_privilege.
    public static let insufficientPrivilege = "42501"
    /// `42883` undefined_function.
    public static let undefinedFunction = "42883"
    /// `55P03` lock_not_available: `lock_timeout` ran out.
    public static let lockNotAvailable = "55P03"

    /// An SQLSTATE's class: its first two characters.
    public enum Class {
        /// `08` connection exception.
        public static let connectionException = "08"
        /// `22` data exception.
        public static let dataException = "22"
        /// `23` integrity constraint violation.
        public static let integrityConstraintViolation = "23"
        /// `40` transaction rollback (serialization failure, deadlock).
        public static let transactionRollback = "40"
        /// `53` insufficient resources (disk full, out of memory, too many connections).
        public static let insufficientResources = "53"
        /// `54` program limit exceeded.
        public static let programLimitExceeded = "54"
        /// `57` operator intervention (statement timeout or cancel, shutdown, crash).
        public static let operatorIntervention = "57"
    }
}
