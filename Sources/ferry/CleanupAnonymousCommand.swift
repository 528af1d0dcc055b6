import FerryCommandLine
import FerryGateway
import FerryLoop
import FerryPostgres
import Foundation

/// `ferry cleanup-anonymous`: deletes anonymous users not seen for a number of days,
/// with their rows in every synced table, in batches (PROTOCOL.md, Accounts).
enum CleanupAnonymousCommand: Command {
    static let name = "cleanup-anonymous"
    static let summary = "delete anonymous users (and their rows) inactive for N days"
    static let usage = """
        ferry cleanup-anonymous --inactive-days <N> [--batch <size>] [--dry-run] [options]

        Deletes anonymous users (no email) whose last sign-up, refresh or sign-in is more
        than N days old, with their sessions and their rows in every synced table. Works in
        batches: each call of ferry.cleanup_anonymous is its own transaction and prints one
        line, until a batch deletes nothing. Interrupting it loses at most the batch in
        flight (rolled back); run it again to go on. Users with an email are never touched.
        --dry-run prints how many users a run would delete and changes nothing.
        The gateway's role may run it (the functions are granted to ferry_gateway).
        Exit status: 0 done, 1 a database error, 2 bad settings.
        """
    static let settings: [Setting] = [
        Setting(
            "database-url", env: "FERRY_DATABASE_URL",
            help: "PostgreSQL URL of ferry_gateway (or an owner or superuser role)", isSecret: true),
        Setting("inactive-days", help: "delete anonymous users not seen for more than this many days (1...36500)"),
        Setting(
            "batch", default: "1000",
            help: "users per transaction (1...100000): smaller batches hold locks for less time"),
        Setting("dry-run", help: "print how many users would be deleted; change nothing", isSwitch: true),
    ]

    static func run(_ values: SettingValues) throws -> Int32 {
        let url = try databaseURL(values)
        let days = try values.integer("inactive-days", in: 1...36_500)!
        let batch = try values.integer("batch", in: 1...100_000)!
        let dryRun = values.isOn("dry-run")
        return try runBlocking {
            let client = try await connectToDatabase(url, applicationName: "ferry-cleanup-anonymous")
            do {
                if dryRun {
                    try await countInactive(client, days: days)
                } else {
                    try await deleteInactive(client, days: days, batch: batch)
                }
                await client.close()
            } catch {
                await client.close()
                throw error
            }
            return ExitStatus.success
        }
    }

    /// Calls ``ferry.cleanup_anonymous`` until a call deletes nothing; one line per batch.
    private static func deleteInactive(_ client: PostgresClient, days: Int, batch: Int) async throws {
        // Outside an explicit transaction, each call commits on its own: an interrupted
        // run keeps every batch but the one in flight.
        let statement = PostgresStatement(
            "select ferry.cleanup_anonymous(make_interval(days => $1::integer), $2::integer)",
            [String(days), String(batch)])
        var total = 0
        while true {
            let result = try await client.query(statement)
            guard let text = result[0, 0], let deleted = Int(text) else {
                throw CleanupError("ferry.cleanup_anonymous returned no count")
            }
            if deleted == 0 { break }
            total += deleted
            printLine("deleted \(users(deleted)) (\(total) so far)")
        }
        printLine("done: deleted \(users(total)) not seen for more than \(days) days")
    }

    /// Prints what a run would delete now.
    private static func countInactive(_ client: PostgresClient, days: Int) async throws {
        let result = try await client.query(
            "select ferry.count_inactive_anonymous(make_interval(days => $1::integer))", [String(days)])
        guard let text = result[0, 0], let count = Int(text) else {
            throw CleanupError("ferry.count_inactive_anonymous returned no count")
        }
        printLine("dry run: would delete \(users(count)) not seen for more than \(days) days; nothing changed")
    }

    private static func users(_ count: Int) -> String {
        count == 1 ? "1 anonymous user" : "\(count) anonymous users"
    }

    /// `--database-url`, else `FERRY_DATABASE_URL`, checked to parse.
    private static func databaseURL(_ values: SettingValues) throws(SettingsError) -> String {
        let url = values.string("database-url")!
        do {
            _ = try PostgresConfiguration(url)
        } catch {
            throw SettingsError("invalid \(values.name("database-url")): \(error.message)")
        }
        return url
    }

}

/// Why a cleanup run stopped; printed as one line after `ferry cleanup-anonymous: `.
struct CleanupError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
