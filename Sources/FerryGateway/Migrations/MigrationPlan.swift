import Foundation

/// Where each migration stands against one database: the answer to `ferry migrate --status`.
public struct MigrationPlan: Sendable, Equatable {
    /// One migration's state.
    public enum State: Sendable, Equatable {
        /// Applied at the given UTC time, with the same checksum as the file.
        case applied(at: String)
        /// Not applied yet.
        case pending
        /// A numbered file applied at the given time, but changed since: refused.
        case changed(at: String)
        /// A repeatable file applied at the given time, changed since: applied again.
        case reapply(at: String)
        /// Recorded as applied at the given time, but no file has that name any more.
        case missingFile(at: String)
        /// Recorded as applied at the given time from a directory not given this time:
        /// not compared with any file.
        case appliedElsewhere(at: String)
    }

    /// One line of the plan.
    public struct Entry: Sendable, Equatable {
        /// The qualified name, e.g. `ferry/0001_roles.sql`.
        public let name: String
        /// Where it stands.
        public let state: State
        /// The file, when there is one.
        public let migration: Migration?
    }

    /// Every migration on disk in the order it applies, then applied ones whose file is gone.
    public let entries: [Entry]
    /// Ledger rows of numbered files under Ferry's own label (``Migrator/ferryLabel``)
    /// that its directory does not have: the database was migrated by an earlier version
    /// of Ferry, whose history this one does not continue. A run refuses it.
    public let earlierHistory: [String]
    /// Whether those rows are a newer version's: every numbered file of Ferry's own
    /// directory is applied, and the rows it lacks all come after its last. A rollback's
    /// older binary meets this; its `ferry migrate` must not run.
    public let historyIsNewer: Bool

    /// The files a run applies, in order: the pending ones, and the repeatable ones that changed.
    public var pending: [Migration] {
        entries.compactMap { entry in
            switch entry.state {
            case .pending, .reapply: entry.migration
            default: nil
            }
        }
    }
    /// The applied numbered files that changed on disk.
    public var changed: [Entry] { entries.filter { if case .changed = $0.state { true } else { false } } }
    /// How many files are applied and unchanged.
    public var appliedCount: Int { entries.filter { if case .applied = $0.state { true } else { false } }.count }
    /// How many files were never applied.
    public var pendingCount: Int { entries.filter { $0.state == .pending }.count }
    /// How many repeatable files changed since they were applied.
    public var reapplyCount: Int { entries.filter { if case .reapply = $0.state { true } else { false } }.count }
    /// How many ledger rows belong to directories not given this time.
    public var appliedElsewhereCount: Int {
        entries.filter { if case .appliedElsewhere = $0.state { true } else { false } }.count
    }

    /// Compares the files with the ledger. Ledger rows outside `labels` belong to
    /// directories not given this time: listed last, as ``State/appliedElsewhere(at:)``.
    public init(migrations: [Migration], applied: [AppliedMigration], labels: Set<String>) {
        let appliedByName = Dictionary(applied.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        var entries: [Entry] = migrations.map { migration in
            guard let record = appliedByName[migration.name] else {
                return Entry(name: migration.name, state: .pending, migration: migration)
            }
            let state: State =
                record.checksum == migration.checksum
                ? .applied(at: record.appliedAt)
                : migration.kind == .repeatable ? .reapply(at: record.appliedAt) : .changed(at: record.appliedAt)
            return Entry(name: migration.name, state: state, migration: migration)
        }
        let onDisk = Set(migrations.map(\.name))
        var elsewhere: [Entry] = []
        var earlierHistory: [String] = []
        let ferry = Migrator.ferryLabel + "/"
        let ferryFunctions = ferry + MigrationDirectory.functionsFolder + "/"
        for record in applied where !onDisk.contains(record.name) {
            if let label = record.name.split(separator: "/").first, labels.contains(String(label)) {
                entries.append(Entry(name: record.name, state: .missingFile(at: record.appliedAt), migration: nil))
                if labels.contains(Migrator.ferryLabel), record.name.hasPrefix(ferry),
                    !record.name.hasPrefix(ferryFunctions)
                {
                    earlierHistory.append(record.name)
                }
            } else {
                elsewhere.append(
                    Entry(name: record.name, state: .appliedElsewhere(at: record.appliedAt), migration: nil))
            }
        }
        self.entries = entries + elsewhere
        self.earlierHistory = earlierHistory
        let ferryNumbered = migrations.map(\.name).filter { $0.hasPrefix(ferry) && !$0.hasPrefix(ferryFunctions) }
        let appliedNames = Set(entries.compactMap { if case .applied = $0.state { $0.name } else { nil } })
        let lastOnDisk = ferryNumbered.max() ?? ""
        historyIsNewer =
            !earlierHistory.isEmpty && earlierHistory.allSatisfy { $0 > lastOnDisk }
            && ferryNumbered.allSatisfy(appliedNames.contains)
    }

    /// Why a run applies nothing, when it refuses: a database migrated by an earlier
    /// version of Ferry, or a numbered file changed after it was applied. Nil when a run
    /// may go ahead.
    public var refusal: MigrationError? {
        if let first = earlierHistory.first, historyIsNewer {
            let others = earlierHistory.count > 1 ? " and \(earlierHistory.count - 1) more" : ""
            return MigrationError(
                "this database was migrated by a newer version of Ferry: its ledger records \(first)\(others), "
                    + "which comes after this version's last migration. An older version must not migrate it (it "
                    + "would put back its older functions); its `ferry serve` serves the newer schema as it is "
                    + "(docs/DEPLOY.md, \"Rollback\"), or run the newer version's `ferry migrate`",
                migrationName: first)
        }
        if let first = earlierHistory.first {
            let others = earlierHistory.count > 1 ? " and \(earlierHistory.count - 1) more" : ""
            return MigrationError(
                "this database was migrated by an earlier version of Ferry: its ledger records \(first)\(others), "
                    + "which this version's sql/ferry does not have (its history was rewritten into a new baseline "
                    + "before Ferry's first release), so its schema cannot be brought up to date. For the development "
                    + "database: `ferry db reset` (deletes it with its data), then `ferry migrate` or "
                    + "`ferry dev` (docs/OPERATIONS.md, \"A database made by an earlier version\")",
                migrationName: first)
        }
        if let changed = changed.first {
            let others = self.changed.count > 1 ? " (and \(self.changed.count - 1) more)" : ""
            return MigrationError(
                "\(changed.name) was changed after it was applied\(others): applied migrations are never edited; "
                    + "restore the file and add a new migration instead",
                migrationName: changed.name)
        }
        return nil
    }
}

extension MigrationPlan {
    /// What `ferry migrate --status` prints: one line per migration, then the counts,
    /// then why a run would refuse a database made by an earlier version.
    public var statusLines: [String] {
        entries.map { entry in
            switch entry.state {
            case .applied(let time): "applied  \(entry.name)  \(time)"
            case .pending: "pending  \(entry.name)"
            case .changed(let time): "changed  \(entry.name)  applied \(time), the file differs since"
            case .reapply(let time): "changed  \(entry.name)  applied \(time), will re-apply"
            case .missingFile(let time): "missing  \(entry.name)  applied \(time), no such file now"
            case .appliedElsewhere(let time): "applied  \(entry.name)  \(time)  (its directory was not given)"
            }
        } + [summaryLine] + (earlierHistory.isEmpty ? [] : [refusal?.description ?? ""])
    }

    private var summaryLine: String {
        var counts = "\(appliedCount) applied, \(pendingCount) pending, \(changed.count) changed"
        if reapplyCount > 0 { counts += ", \(reapplyCount) to re-apply" }
        let elsewhere = appliedElsewhereCount
        guard elsewhere > 0 else { return counts }
        return counts + "; \(elsewhere) more applied from directories not given (pass their --dir to check them)"
    }

    /// What `ferry migrate --dry-run` prints: the files a run would apply, in order.
    public var dryRunLines: [String] {
        let lines = entries.compactMap { entry in
            switch entry.state {
            case .pending: "would apply \(entry.name)"
            case .reapply: "would re-apply \(entry.name)"
            default: nil
            }
        }
        return lines.isEmpty ? ["nothing to apply (\(appliedCount) applied)"] : lines
    }
}

/// A row of `ferry.schema_migrations`.
public struct AppliedMigration: Sendable, Equatable {
    /// The qualified file name.
    public let name: String
    /// The SHA-256 of the file when it was applied.
    public let checksum: String
    /// When it was applied, UTC, `2026-11-29T15:30:00Z`.
    public let appliedAt: String

    /// A ledger row.
    public init(name: String, checksum: String, appliedAt: String) {
        self.name = name
        self.checksum = checksum
        self.appliedAt = appliedAt
    }
}
