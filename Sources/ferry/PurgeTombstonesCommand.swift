import FerryCommandLine
import FerryGateway
import FerryLoop
import FerryPostgres
import Foundation

/// `ferry purge-tombstones`: deletes tombstones older than the retention period from
/// every synced table, in batches, and moves the purge horizon (PROTOCOL.md, Pull:
/// `409 cursor_expired`).
enum PurgeTombstonesCommand: Command {
    static let name = "purge-tombstones"
    static let summary = "delete tombstones (soft-deleted rows) older than a retention period"
    static let usage = """
        ferry purge-tombstones --older-than <duration> [--batch <size>] [--dry-run] [options]

        Deletes tombstones (rows with _deleted) whose updated_at is older than the duration
        (30d, 12h, 15m, 45s) from every synced table, and nothing else. Works in batches:
        each call of ferry.purge_tombstones is its own transaction and prints one line,
        until a batch deletes nothing. Each batch moves the purge horizon: a pull with a
        cursor that may have missed a purged tombstone answers 409 cursor_expired, and that
        client starts over with a pull without a cursor. Interrupting it loses at most the
        batch in flight (rolled back); run it again to go on.
        --dry-run prints how many tombstones a run would delete and changes nothing.
        The gateway's role may run it (the functions are granted to ferry_gateway);
        `ferry serve --purge-tombstones-every` runs the same purge in-process.
        Exit status: 0 done, 1 a database error, 2 bad settings.
        """
    static let settings: [Setting] = [
        Setting(
            "database-url", env: "FERRY_DATABASE_URL",
            help: "PostgreSQL URL of ferry_gateway (or an owner or superuser role)", isSecret: true),
        Setting("older-than", help: "delete tombstones older than this, e.g. 30d, 12h (1 s to 36500 days)"),
        Setting(
            "batch", default: "10000",
            help: "tombstones per transaction (1...1000000): smaller batches hold locks for less time"),
        Setting("dry-run", help: "print how many tombstones would be deleted; change nothing", isSwitch: true),
    ]

    static func run(_ values: SettingValues) throws -> Int32 {
        let url = values.string("database-url")!
        do {
            _ = try PostgresConfiguration(url)
        } catch {
            throw SettingsError("invalid \(values.name("database-url")): \(error.message)")
        }
        let olderThanText = values.string("older-than")
        let seconds = try values.duration("older-than", maximumSeconds: 36_500 * 86_400)!
        let olderThan = olderThanText ?? "\(seconds)s"
        let batch = try values.integer("batch", in: 1...1_000_000)!
        let dryRun = values.isOn("dry-run")
        return try runBlocking {
            let client = try await connectToDatabase(url, applicationName: "ferry-purge-tombstones")
            do {
                if dryRun {
                    let result = try await client.query(
                        "select ferry.count_purgeable_tombstones(make_interval(secs => $1::double precision))",
                        [String(seconds)])
                    guard let text = result[0, 0], let count = Int(text) else {
                        throw CleanupError("ferry.count_purgeable_tombstones returned no count")
                    }
                    printLine("dry run: would delete \(tombstones(count)) older than \(olderThan); nothing changed")
                } else {
                    // Outside an explicit transaction, each call commits on its own.
                    let statement = PostgresStatement(
                        "select ferry.purge_tombstones(make_interval(secs => $1::double precision), $2::integer)",
                        [String(seconds), String(batch)])
                    var total = 0
                    while true {
                        let result = try await client.query(statement)
                        guard let text = result[0, 0], let deleted = Int(text) else {
                            throw CleanupError("ferry.purge_tombstones returned no count")
                        }
                        if deleted == 0 { break }
                        total += deleted
                        printLine("deleted \(tombstones(deleted)) (\(total) so far)")
                    }
                    printLine("done: deleted \(tombstones(total)) older than \(olderThan)")
                }
                await client.close()
            } catch {
                await client.close()
                throw error
            }
            return ExitStatus.success
        }
    }

    private static func tombstones(_ count: Int) -> String {
        count == 1 ? "1 tombstone" : "\(count) tombstones"
    }
}
