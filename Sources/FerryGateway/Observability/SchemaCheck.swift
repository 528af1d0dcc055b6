import FerryPostgres

/// Whether the gateway's database can serve this binary: it answers, its
/// `ferry.schema_version()` is at least ``Ferry/requiredSchemaVersion``, it is a primary
/// (`pg_is_in_recovery()` false), and its
/// history is not a logical restore left unfinished (`ferry.note_history()`, which
/// also notes a new timeline). `ferry serve` asks before it serves, `/readyz` on every
/// probe, and the gateway whenever its listener connects (after a failover, say).
///
/// At least, not equal: while a rolling deploy migrates the database to a newer version,
/// the older gateways still serve. `ferry migrate` grants the function to `ferry_gateway`
/// (`sql/ferry/functions/version.sql`).
enum SchemaCheck: Equatable, Sendable {
    /// The schema is at this binary's version or newer.
    case ready
    /// The database is in recovery (a standby): it refuses every write.
    case standby
    /// No connection (refused, unknown database or role, authentication, timeout):
    /// libpq's text, for the log only.
    case unreachable(String)
    /// No schema `ferry`, or no `ferry.schema_version()`: never migrated (or by an
    /// earlier version of Ferry, whose history `ferry migrate` refuses).
    case notMigrated
    /// `ferry.schema_version()` answered this version, older than the binary's.
    case behind(Int)
    /// The role may not call `ferry.schema_version()`.
    case versionNotPermitted
    /// A logical restore (another cluster or database than the one Ferry's history names)
    /// that `ferry restore-finish` has not finished: cursors could miss rows.
    case restored
    /// Any other failure, described for the log.
    case failed(String)

    /// Asks `pool` and calls `completion` on its loop with the answer.
    static func run(on pool: PostgresPool, _ completion: @escaping (SchemaCheck) -> Void) {
        pool.run(SchemaVersion()) { result in
            let check = SchemaCheck(result)
            guard check == .ready else { return completion(check) }
            pool.run(NoteHistory()) { completion(SchemaCheck(history: $0)) }
        }
    }

    /// Classifies `ferry.note_history()`'s outcome.
    init(history result: Result<NoteHistory.Answer, QueryFailure>) {
        switch result {
        case .success(let answer): self = answer.history == "restored" ? .restored : .ready
        case .failure(.shape): self = .failed("ferry.note_history() answered no text")
        case .failure(.database(let error)):
            switch error.kind {
            case .connectionFailed, .connectionLost, .timeout, .poolExhausted:
                self = .unreachable(error.message.split(whereSeparator: \.isNewline).joined(separator: " "))
            default: self = .failed("ferry.note_history() failed: \(error.description)")
            }
        }
    }

    /// Classifies the query's outcome.
    init(_ result: Result<SchemaVersion.Answer, QueryFailure>) {
        switch result {
        case .success(let answer):
            self =
                answer.version < Ferry.requiredSchemaVersion
                ? .behind(answer.version) : answer.inRecovery ? .standby : .ready
        case .failure(.shape):
            self = .failed("ferry.schema_version() answered no integer, or pg_is_in_recovery() no boolean")
        case .failure(.database(let error)):
            switch (error.kind, error.sqlState) {
            case (.server, SQLState.invalidSchemaName), (.server, SQLState.undefinedFunction): self = .notMigrated
            case (.server, SQLState.insufficientPrivilege): self = .versionNotPermitted
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
        case .notMigrated, .behind, .versionNotPermitted: "database schema is not at this gateway's version"
        case .restored: "database restore is not finished"
        case .standby: "database is a standby (in recovery), not a primary"
        }
    }

    /// What the log says, with what to do.
    var advice: String {
        let migrate = "run `ferry migrate` as the database owner, with this version's sql/ferry"
        switch self {
        case .ready:
            return "the database answers and its schema is at version \(Ferry.requiredSchemaVersion) or newer"
        case .unreachable(let message):
            return "cannot connect to the database (\(message)); check FERRY_DATABASE_URL and that PostgreSQL runs "
                + "there. A new database must be created, then migrated: \(migrate) (it also creates the role "
                + "ferry_gateway)"
        case .notMigrated:
            return "the database has no Ferry schema (ferry.schema_version() is missing): it was never migrated "
                + "(or by an earlier version of Ferry, which ferry migrate says how to replace); " + migrate
        case .behind(let version):
            return "the database's schema is older than this binary: ferry.schema_version() is \(version), this "
                + "binary needs \(Ferry.requiredSchemaVersion) or newer; " + migrate
        case .versionNotPermitted:
            return "the gateway's role may not call ferry.schema_version(): serve as ferry_gateway, which "
                + "ferry migrate grants it to; or \(migrate)"
        case .restored:
            return "the database was restored from a logical dump (pg_dump) into another cluster or database, "
                + "whose transaction ids mean something else: cursors would miss rows. Run `ferry restore-finish` "
                + "once, as the database owner (docs/OPERATIONS.md, \"Backups and restores\")"
        case .standby:
            return "the database is in recovery (pg_is_in_recovery() is true): a standby refuses every write. Point "
                + "FERRY_DATABASE_URL at the primary (haproxy on Patroni's /primary check, say); after a failover "
                + "the gateway is ready again once its connections reach the new primary"
        case .failed(let description):
            return "the schema check failed: \(description)"
        }
    }
}
