import FerryGateway
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

/// `ferry directory-backfill`, the built binary, with two shards' databases (shard 1 and
/// 2, migrated with `sql/ferry`) and an email directory database (`sql/directory`), as an
/// operator turning the directory on for shards that already have accounts would run it.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct DirectoryBackfillTests {
    /// Two shards and a directory; the command reaches the directory as `ferry_gateway`,
    /// granted `ferry_directory` as the gateways' login is.
    func withShards(_ body: (MigratedDatabase, MigratedDatabase, PostgresClient, String) async throws -> Void)
        async throws
    {
        try await MigratedDatabase.with(prefix: "ferry_backfill_one") { one in
            try await MigratedDatabase.with(prefix: "ferry_backfill_two") { two in
                try await TestDatabase.with(prefix: "ferry_backfill_directory") { directory in
                    let admin = try await directory.connect()
                    do {
                        try await Migrator(directories: [
                            MigrationDirectory(
                                path: TestRepository.sqlRoot + "/" + Migrator.directoryLabel,
                                label: Migrator.directoryLabel)
                        ]).migrate(admin)
                        try await admin.execute("grant ferry_directory to ferry_gateway")
                        _ = try await one.admin.execute("select ferry.set_shard(1)")
                        _ = try await two.admin.execute("select ferry.set_shard(2)")
                        try await body(one, two, admin, try directory.url(user: "ferry_gateway"))
                        await admin.close()
                    } catch {
                        await admin.close()
                        throw error
                    }
                }
            }
        }
    }

    func backfill(_ shard: MigratedDatabase, directory: String, _ arguments: [String] = []) async throws -> FerryRun {
        try await runFerry(
            ["directory-backfill", "--database-url", shard.database.url, "--directory-database-url", directory]
                + arguments,
            databaseURL: nil)
    }

    /// Every row of the directory, as text, in email order.
    func directoryRows(_ directory: PostgresClient) async throws -> [String] {
        let result = try await directory.query(
            """
            select email || ' ' || shard || ' ' || user_id || ' ' || state || ' ' || claimed_at || ' '
                || coalesce(linked_at::text, '-')
            from directory.emails order by email
            """)
        return (0..<result.count).map { result[$0, 0] ?? "" }
    }

    /// `email user_id` of each of a shard's confirmed emails, or of a shard's directory rows.
    func owners(_ client: PostgresClient, _ sql: String) async throws -> [String] {
        let result = try await client.query(sql)
        return (0..<result.count).map { result[$0, 0] ?? "" }
    }

    @Test func linksEachShardsConfirmedEmailsOnceAndReportsAnEmailOfAnotherAccount() async throws {
        try await withShards { one, two, directory, directoryURL in
            // Shard 2 has shared@ too: whoever runs first owns it in the directory.
            _ = try await two.admin.execute(
                """
                insert into ferry.users (email, password_hash, email_confirmed)
                    values ('shared@example.com', 'h', true), ('two@example.com', 'h', true);
                """)
            let first = try await backfill(two, directory: directoryURL)
            #expect(first.status == 0, "stderr: \(first.errors)")
            #expect(
                first.lines == [
                    "batch 1: 2 emails; 2 linked, 0 already linked, 0 in use by another account (2 emails so far)",
                    "done: 2 emails of shard 2: 2 linked, 0 already linked, 0 in use by another account",
                ])

            // Shard 1: 1,199 confirmed emails and shared@; unconfirmed and anonymous users,
            // which are no one's in the directory; u1's claim left pending by a link that
            // crashed, u2's already linked.
            _ = try await one.admin.execute(
                """
                insert into ferry.users (email, password_hash, email_confirmed)
                    select 'u' || n || '@example.com', 'h', true from generate_series(0, 1198) n;
                insert into ferry.users (email, password_hash, email_confirmed)
                    values ('shared@example.com', 'h', true), ('unconfirmed@example.com', 'h', false);
                insert into ferry.users default values;
                """)
            let u1 = try #require(
                try await one.admin.query("select id from ferry.users where email = 'u1@example.com'")[0, 0])
            let u2 = try #require(
                try await one.admin.query("select id from ferry.users where email = 'u2@example.com'")[0, 0])
            _ = try await directory.query(
                """
                insert into directory.emails (email, shard, user_id, state, claimed_at, linked_at) values
                    ('u1@example.com', 1, $1, 'pending', now() - interval '1 hour', null),
                    ('u2@example.com', 1, $2, 'linked', now() - interval '1 day', now() - interval '1 day')
                """, [u1, u2])

            let run = try await backfill(one, directory: directoryURL, ["--batch", "500"])
            #expect(run.status == 1, "stdout: \(run.output) stderr: \(run.errors)")
            let batches = run.lines.filter { $0.hasPrefix("batch ") }
            #expect(batches.count == 3)
            #expect(batches.first?.hasPrefix("batch 1: 500 emails; ") == true)
            #expect(batches.last?.hasPrefix("batch 3: 200 emails; ") == true)
            #expect(batches.last?.hasSuffix("(1200 emails so far)") == true)
            let shardTwosUser = try #require(
                try await two.admin.query("select id from ferry.users where email = 'shared@example.com'")[0, 0])
            let inUse = run.lines.filter { $0.hasPrefix("in use: ") }
            #expect(inUse.count == 1)
            #expect(
                inUse.first?.hasPrefix("in use: shared@example.com is shard 2's user \(shardTwosUser) (linked)") == true
            )
            #expect(
                run.lines.last
                    == "done: 1200 emails of shard 1: 1198 linked, 1 already linked, 1 in use by another account")
            #expect(run.errors.contains("1 email of this shard the directory gives another account"), "\(run.errors)")

            // Each of shard 1's confirmed emails is its user's, linked; shared@ stays shard 2's.
            let expected = try await owners(
                one.admin,
                """
                select email || ' ' || id from ferry.users
                where email_confirmed and email <> 'shared@example.com' order by email
                """)
            #expect(expected.count == 1199)
            let linked = try await owners(
                directory,
                "select email || ' ' || user_id from directory.emails where shard = 1 and state = 'linked' order by email"
            )
            #expect(linked == expected)
            #expect(try await owners(directory, "select count(*) from directory.emails where shard <> 1") == ["2"])
            #expect(
                try await owners(
                    directory, "select shard || ' ' || user_id from directory.emails where email = 'shared@example.com'"
                )
                    == ["2 \(shardTwosUser)"])

            // Again: nothing changes, and the email of two accounts is still reported.
            let before = try await directoryRows(directory)
            let again = try await backfill(one, directory: directoryURL)
            #expect(again.status == 1, "stderr: \(again.errors)")
            #expect(
                again.lines.last
                    == "done: 1200 emails of shard 1: 0 linked, 1199 already linked, 1 in use by another account")
            #expect(try await directoryRows(directory) == before)
            let twoAgain = try await backfill(two, directory: directoryURL)
            #expect(twoAgain.status == 0, "stderr: \(twoAgain.errors)")
            #expect(try await directoryRows(directory) == before)
        }
    }

    @Test func anEmptyShardLinksNothingAndSucceeds() async throws {
        try await withShards { one, _, directory, directoryURL in
            let run = try await backfill(one, directory: directoryURL)
            #expect(run.status == 0, "stderr: \(run.errors)")
            #expect(run.lines == ["done: 0 emails of shard 1: 0 linked, 0 already linked, 0 in use by another account"])
            #expect(try await directoryRows(directory).isEmpty)
        }
    }

    @Test func withoutTheDirectorysURLItRefusesToStart() async throws {
        try await withShards { one, _, _, _ in
            let run = try await runFerry(["directory-backfill", "--database-url", one.database.url], databaseURL: nil)
            #expect(run.status == 2)
            #expect(run.errors.contains("FERRY_DIRECTORY_MIGRATE_DATABASE_URL"), "\(run.errors)")
        }
    }
}
