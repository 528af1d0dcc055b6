import FerryCommandLine
import FerryGateway
import FerryLoop
import FerryPostgres
import Foundation

/// `ferry directory-backfill`: links a shard's confirmed emails into the email directory
/// (docs/SCALING.md, "The email directory"), for emails linked before the directory was
/// turned on.
enum DirectoryBackfillCommand: Command {
    static let name = "directory-backfill"
    static let summary = "link a shard's existing emails into the email directory"
    static let usage = """
        ferry directory-backfill --directory-database-url <url> [--batch <size>] [options]

        Reads this shard's confirmed emails (ferry.users where email_confirmed, by
        --database-url) and links each into the email directory as this shard's
        (ferry.shard()) user's: directory.claim, then directory.mark_linked, one
        statement and one directory transaction per batch, a line per batch. Run it on each
        shard before giving its gateways FERRY_DIRECTORY_DATABASE_URL, else another shard
        may claim one of its emails. Running it again changes nothing: an email already
        this user's is counted as already linked. An email the directory gives another
        (shard, user) is printed and counted, the rest go on, and the exit status is 1:
        two accounts have that email; settle it (one account gives it up, or is deleted)
        and run it again. Interrupting it loses nothing (a batch's claims are linked in
        the transaction that made them); run it again to go on.
        Exit status: 0 every email linked, 1 an email in use by another account or a
        database error, 2 bad settings.
        """
    static let settings: [Setting] = [
        Setting(
            "database-url", env: "FERRY_MIGRATE_DATABASE_URL",
            help: "PostgreSQL URL of this shard's owner or a superuser (falls back to FERRY_DATABASE_URL)",
            isOptional: true, isSecret: true),
        Setting(
            "directory-database-url", env: "FERRY_DIRECTORY_MIGRATE_DATABASE_URL",
            help: "PostgreSQL URL of the directory's owner, or of a login granted ferry_directory", isSecret: true),
        Setting(
            "batch", default: "500",
            help: "emails per directory transaction (1...10000): smaller batches hold locks for less time"),
    ]

    static func run(_ values: SettingValues) throws -> Int32 {
        let shardURL = try MigrateCommand.databaseURL(values, environment: ProcessInfo.processInfo.environment)
        let directoryURL = values.string("directory-database-url")!
        do {
            _ = try PostgresConfiguration(directoryURL)
        } catch {
            throw SettingsError("invalid \(values.name("directory-database-url")): \(error.message)")
        }
        let batch = try values.integer("batch", in: 1...10_000)!
        return try runBlocking {
            try await withDatabase(shardURL, applicationName: "ferry-directory-backfill") { shard in
                try await withDatabase(directoryURL, applicationName: "ferry-directory-backfill") { directory in
                    try await backfill(from: shard, into: directory, batch: batch)
                }
            }
        }
    }

    /// What a run did so far.
    private struct Counts {
        var read = 0
        var linked = 0
        var alreadyLinked = 0
        var inUse = 0

        var text: String { "\(linked) linked, \(alreadyLinked) already linked, \(inUse) in use by another account" }
    }

    /// Reads the shard's confirmed emails in batches by user id and links each batch.
    private static func backfill(from shard: PostgresClient, into directory: PostgresClient, batch: Int)
        async throws -> Int32
    {
        let number = try await shard.query("select ferry.shard()")
        guard let shardText = number[0, 0], let shardNumber = Int(shardText) else {
            throw CleanupError("ferry.shard() returned no number")
        }
        var counts = Counts()
        var after = "00000000-0000-0000-0000-000000000000"
        var batches = 0
        while true {
            // By id, so that each batch starts where the last ended whatever links or
            // deletions happen meanwhile.
            let users = try await shard.query(
                """
                select id::text, email from ferry.users
                where email_confirmed and email is not null and id > $1::uuid
                order by id limit $2::integer
                """, [after, String(batch)])
            guard users.count > 0 else { break }
            var rows: [[String: String]] = []
            for index in 0..<users.count {
                guard let id = users[index, 0], let email = users[index, 1] else {
                    throw CleanupError("ferry.users returned a row without id or email")
                }
                rows.append(["user_id": id, "email": email])
            }
            after = rows[rows.count - 1]["user_id"]!
            try await link(rows, shard: shardNumber, into: directory, counts: &counts)
            batches += 1
            printLine("batch \(batches): \(emails(rows.count)); \(counts.text) (\(emails(counts.read)) so far)")
        }
        printLine("done: \(emails(counts.read)) of shard \(shardNumber): \(counts.text)")
        guard counts.inUse == 0 else {
            printError(
                "ferry directory-backfill: \(emails(counts.inUse)) of this shard the directory gives another "
                    + "account (printed above): settle each, then run this again")
            return ExitStatus.failure
        }
        return ExitStatus.success
    }

    /// Claims and marks linked one batch, in one statement (one transaction); prints each
    /// email held by another (shard, user).
    private static func link(
        _ rows: [[String: String]], shard: Int, into directory: PostgresClient, counts: inout Counts
    ) async throws {
        let json = String(decoding: try JSONEncoder().encode(rows), as: UTF8.self)
        // mark_linked only after this row's claim: the select list is computed on the
        // joined row, whose claim is made first.
        let result = try await directory.query(
            """
            select b.email, b.user_id::text, c.outcome,
                case when c.outcome = 'claimed' then directory.mark_linked(b.email, $2::integer, b.user_id) end,
                o.shard, o.user_id::text, o.state
            from json_to_recordset($1::json) as b(user_id uuid, email text)
            cross join lateral directory.claim(b.email, $2::integer, b.user_id) c
            left join lateral directory.lookup(b.email) o on c.outcome = 'in_use'
            order by b.user_id
            """, [json, String(shard)])
        for index in 0..<result.count {
            counts.read += 1
            let email = result[index, 0] ?? "?"
            switch result[index, 2] {
            case "claimed" where result[index, 3] == "t":
                counts.linked += 1
            case "linked":
                counts.alreadyLinked += 1
            case "in_use":
                counts.inUse += 1
                let owner =
                    result[index, 4].map {
                        "shard \($0)'s user \(result[index, 5] ?? "?") (\(result[index, 6] ?? "?"))"
                    }
                    ?? "another account"
                printLine("in use: \(email) is \(owner), not this shard's user \(result[index, 1] ?? "?")")
            default:
                throw CleanupError(
                    "directory.claim of \(email) answered \(result[index, 2] ?? "nothing") "
                        + "(marked linked: \(result[index, 3] ?? "no"))")
            }
        }
    }

    private static func emails(_ count: Int) -> String { count == 1 ? "1 email" : "\(count) emails" }
}
