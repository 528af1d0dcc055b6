import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

/// `ferry cleanup-anonymous`, the built binary, against a database migrated with `sql/ferry`
/// and connecting as `ferry_gateway`, as an operator's cron job would.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct CleanupAnonymousTests {
    /// Runs `ferry cleanup-anonymous <arguments>`.
    func cleanup(_ arguments: [String], databaseURL: String) async throws -> FerryRun {
        try await runFerry(["cleanup-anonymous"] + arguments, databaseURL: databaseURL)
    }

    /// A database migrated with `sql/ferry`, then 2,500 anonymous users last seen 40 to 60
    /// days ago, 1,000 seen 1 to 29 days ago, one linked user last seen 400 days ago; each
    /// with a session and two rows in `notes`, a synced table. `stale_users` remembers who
    /// should go. The command connects with ``MigratedDatabase/gatewayURL``: the cleanup
    /// functions are granted to `ferry_gateway`.
    func withPopulatedDatabase(_ body: (MigratedDatabase) async throws -> Void) async throws {
        try await MigratedDatabase.with(prefix: "ferry_cleanup") { database in
            _ = try await database.admin.execute(
                """
                create table notes (id text, user_id uuid not null, primary key (user_id, id));
                select ferry.register_table('notes', 'lww');
                insert into ferry.users (last_seen_at)
                    select now() - make_interval(days => 40 + n % 21) from generate_series(1, 2500) n;
                create table stale_users as select id from ferry.users;
                insert into ferry.users (last_seen_at)
                    select now() - make_interval(days => 1 + n % 29) from generate_series(1, 1000) n;
                insert into ferry.users (email, password_hash, last_seen_at)
                    values ('linked@example.com', 'not-a-real-hash', now() - interval '400 days');
                insert into ferry.sessions (user_id, device_id) select id, gen_random_uuid()::text from ferry.users;
                insert into notes (id, user_id) select 'n' || n, u.id from ferry.users u, generate_series(1, 2) n;
                """)
            try await body(database)
        }
    }

    func count(_ client: PostgresClient, _ sql: String) async throws -> Int {
        try #require(Int(try await client.query(sql)[0, 0] ?? ""))
    }

    @Test func deletesAnonymousUsersInactiveLongerThanTheLimitWithTheirRowsInBatches() async throws {
        try await withPopulatedDatabase { database in
            let client = database.admin
            let run = try await cleanup(["--inactive-days", "30", "--batch", "700"], databaseURL: database.gatewayURL)
            #expect(run.status == 0, "stderr: \(run.errors)")
            #expect(
                run.lines == [
                    "deleted 700 anonymous users (700 so far)",
                    "deleted 700 anonymous users (1400 so far)",
                    "deleted 700 anonymous users (2100 so far)",
                    "deleted 400 anonymous users (2500 so far)",
                    "done: deleted 2500 anonymous users not seen for more than 30 days",
                ])
            #expect(run.errors.isEmpty)

            #expect(try await count(client, "select count(*) from ferry.users where id in (table stale_users)") == 0)
            #expect(try await count(client, "select count(*) from notes where user_id in (table stale_users)") == 0)
            #expect(
                try await count(client, "select count(*) from ferry.sessions where user_id in (table stale_users)") == 0
            )
            // The recent anonymous users and the linked one stay, rows and sessions too.
            #expect(try await count(client, "select count(*) from ferry.users where email is null") == 1000)
            #expect(try await count(client, "select count(*) from ferry.users where email = 'linked@example.com'") == 1)
            #expect(try await count(client, "select count(*) from notes") == 2 * 1001)
            #expect(try await count(client, "select count(*) from ferry.sessions") == 1001)

            let again = try await cleanup(["--inactive-days", "30"], databaseURL: database.gatewayURL)
            #expect(again.status == 0, "stderr: \(again.errors)")
            #expect(again.lines == ["done: deleted 0 anonymous users not seen for more than 30 days"])
            #expect(try await count(client, "select count(*) from ferry.users") == 1001)
        }
    }

    @Test func dryRunPrintsTheCountAndChangesNothing() async throws {
        try await withPopulatedDatabase { database in
            let client = database.admin
            let run = try await cleanup(["--inactive-days", "30", "--dry-run"], databaseURL: database.gatewayURL)
            #expect(run.status == 0, "stderr: \(run.errors)")
            #expect(
                run.lines == [
                    "dry run: would delete 2500 anonymous users not seen for more than 30 days; nothing changed"
                ])
            #expect(try await count(client, "select count(*) from ferry.users") == 3501)
            #expect(try await count(client, "select count(*) from notes") == 2 * 3501)

            // The limit is in days: 50 leaves out those seen 40 to 50 days ago.
            let longer = try await cleanup(["--inactive-days", "50", "--dry-run"], databaseURL: database.gatewayURL)
            let expected = try await count(
                client,
                "select count(*) from ferry.users where email is null and last_seen_at < now() - interval '50 days'")
            #expect(expected > 0 && expected < 2500)
            #expect(
                longer.lines == [
                    "dry run: would delete \(expected) anonymous users not seen for more than 50 days; nothing changed"
                ])
        }
    }

    @Test(arguments: [
        (["--inactive-days", "0"], "invalid --inactive-days: 0 is not a whole number in 1...36500"),
        (["--inactive-days", "30", "--batch", "0"], "invalid --batch: 0 is not a whole number in 1...100000"),
        (
            ["--inactive-days", "30", "--batch", "100001"],
            "invalid --batch: 100001 is not a whole number in 1...100000"
        ),
        (["--inactive-days", "many"], "invalid --inactive-days: many is not a whole number in 1...36500"),
        (["--batch", "10"], "missing setting: pass --inactive-days"),
    ])
    func invalidSettingsAreOneLineAndExitStatus2(arguments: [String], message: String) async throws {
        // Nothing listens on port 1: settings are checked before any connection.
        let run = try await cleanup(arguments, databaseURL: "postgresql://nobody@127.0.0.1:1/none")
        #expect(run.status == 2)
        #expect(run.output.isEmpty)
        #expect(run.errors.split(separator: "\n").count == 1)
        #expect(run.errors.hasPrefix("ferry cleanup-anonymous: \(message)"))
    }
}
