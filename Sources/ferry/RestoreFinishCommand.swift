import FerryCommandLine
import FerryGateway
import FerryLoop
import FerryPostgres
import Foundation

/// `ferry restore-finish`: after a logical restore (pg_dump into another cluster or
/// database), restamps the synced rows and begins a new history epoch, so that every
/// device's cursor expires and first pulls see every row (`ferry.finish_restore`,
/// sql/ferry/functions/history.sql). `ferry serve` refuses a restored database until it ran.
enum RestoreFinishCommand: Command {
    static let name = "restore-finish"
    static let summary = "make a database restored from a logical dump (pg_dump) safe to serve"
    static let usage = """
        ferry restore-finish [options]

        Run once after restoring a pg_dump (pg_restore, or psql with a plain dump) into
        another cluster or database, before ferry serve: the restored rows carry
        transaction ids of the cluster they were dumped from, which mean something else
        here. In one transaction it gives every synced row this cluster's transaction
        id (updated_at, your triggers and cues are left alone), deletes the WatermelonDB
        timestamps and the tombstone purge horizon of the old history, and begins a new
        history epoch: every device's cursor then answers 409 cursor_expired and the
        device pulls everything again. ferry serve refuses the database until this ran.
        Run it as the owner of the synced tables (the role ferry migrate runs as). It
        locks each synced table while it rewrites it. Running it again is harmless but
        expires every cursor again.
        Exit status: 0 done, 1 a database error, 2 bad settings.
        """
    static let settings: [Setting] = [
        Setting(
            "database-url", env: "FERRY_DATABASE_URL",
            help: "PostgreSQL URL of the synced tables' owner (the role ferry migrate runs as)", isSecret: true)
    ]

    static func run(_ values: SettingValues) throws -> Int32 {
        let url = values.string("database-url")!
        do {
            _ = try PostgresConfiguration(url)
        } catch {
            throw SettingsError("invalid \(values.name("database-url")): \(error.message)")
        }
        return try runBlocking {
            let client = try await connectToDatabase(url, applicationName: "ferry-restore-finish")
            do {
                let result = try await client.query("select ferry.finish_restore()")
                guard let text = result[0, 0], let rows = Int(text) else {
                    throw CleanupError("ferry.finish_restore returned no count")
                }
                printLine("done: \(rows == 1 ? "1 row" : "\(rows) rows") restamped; a new history epoch began")
                await client.close()
            } catch {
                await client.close()
                throw error
            }
            return ExitStatus.success
        }
    }
}
