import FerryPostgres

/// Whether the gateway's database can serve this binary: it answers, and its ledger
/// records ``Ferry/requiredMigration``. `ferry serve` asks before it serves, and
/// `/readyz` on every probe.
///
/// The gateway's role reads `ferry.schema_migrations` because `ferry migrate`
/// grants it (``Migrator/ledgerGrantSQL``); a ledger it may not read is a database
/// migrated by an older `ferry migrate`.
enum SchemaCheck: Equatable, Sendable {
    /// The schema is at this binary's version.
    case ready
    /// No connection (refused, unknown database or role, authentication, timeout):
    /// libpq's text, for the log only.
    case unreachable(String)
    /// No schema `ferry` or no ledger: never migrated.
    case notMigrated
    /// The ledger lacks ``Ferry/requiredMigration``: migrated by an older version.
    case behind
    /// The role may not read the ledger.
    case ledgerUnreadable
    /// Any other failure, described for the log.
    case failed(String)

    /// The one statement of the check.
    static let statement = PostgresStatement(
        "select exists (select from ferry.schema_migrations where name = $1)", [Ferry.requiredMigration])

    /// Asks `pool` and calls `completion` on its loop with the answer.
    static func run(on pool: PostgresPool, _ completion: @escaping (SchemaCheck) -> Void) {
        pool.query(statement) { completion(SchemaCheck($0)) }
    }

    /// Classifies the statement's result.
    init(_ result: Result<PostgresResult, PostgresError>) {
        switch result {
        case .success(let rows):
            self = rows.count == 1 && rows[0, 0] == "t" ? .ready : .behind
        case .failure(let error):
            switch (error.kind, error.sqlState) {
            // undefined_table, invalid_schema_name
            case (.server, "42P01"), (.server, "3F000"): self = .notMigrated
            // insufficient_privilege
            case (.server, "42501"): self = .ledgerUnreadable
            case (.connectionFailed, _), (.connectionLost, _), (.timeout, _), (.poolExhausted, _):
                self = .unreachable(error.message.split(whereSeparator: \.isNewline).joined(separator: " "))
            default: self = .failed(error.description)
            }
        }
    }

    /// What `/readyz` tells anyone who asks: no host, port, role or libpq text.
    var publicMessage: String {
        switch self {
        case .ready: "ready"
        case .unreachable, .failed: "database is not reachable"
        case .notMigrated, .behind, .ledgerUnreadable: "database schema is not at this gateway's version"
        }
    }

    /// What the log says, with what to do.
    var advice: String {
        let migrate = "run `ferry migrate` as the database owner, with this version's sql/ferry"
        switch self {
        case .ready:
            return "the database answers and its schema is at \(Ferry.requiredMigration)"
        case .unreachable(let message):
            return "cannot connect to the database (\(message)); check FERRY_DATABASE_URL and that PostgreSQL runs "
                + "there. A new database must be created, then migrated: \(migrate) (it also creates the role "
                + "ferry_gateway)"
        case .notMigrated:
            return "the database has no Ferry schema (ferry.schema_migrations is missing): it was never migrated; "
                + migrate
        case .behind:
            return "the database's schema is older than this binary: \(Ferry.requiredMigration) is not applied; "
                + migrate
        case .ledgerUnreadable:
            return "the gateway's role may not read ferry.schema_migrations (a database migrated by an older "
                + "ferry migrate): \(migrate); it grants ferry_gateway read access to it"
        case .failed(let description):
            return "the schema check failed: \(description)"
        }
    }
}
