import FerryGateway
import FerryPostgres
import FerryTestSupport
import Foundation
import Synchronization
import Testing

/// `ferry migrate` against a real PostgreSQL: each test has its own database and its
/// own migration files in a temporary directory labelled `app`.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct MigratorTests {
    /// The repository's `sql/` directory, for Ferry's own migrations.
    static let sqlRoot = TestRepository.sqlRoot

    /// Runs `body` with a fresh database, a connection to it and the given files.
    func withMigrations(
        _ files: [String: String], label: String = "app",
        _ body: (TestDatabase, PostgresClient, MigrationFiles) async throws -> Void
    ) async throws {
        let migrations = try MigrationFiles(files, label: label)
        defer { migrations.remove() }
        try await TestDatabase.with(prefix: "ferry_migrator") { database in
            let client = try await database.connect()
            do {
                try await body(database, client, migrations)
            } catch {
                await client.close()
                throw error
            }
            await client.close()
        }
    }

    func ledger(_ client: PostgresClient) async throws -> [String] {
        let result = try await client.query("select name from ferry.schema_migrations order by name")
        return (0..<result.count).compactMap { result[$0, 0] }
    }

    func tableExists(_ client: PostgresClient, _ name: String) async throws -> Bool {
        try await client.query("select to_regclass($1) is not null", [name])[0, 0] == "t"
    }

    // MARK: - Who migrates

    @Test func aMigratingRoleBoundByRowLevelSecurityIsRefusedBeforeAnythingApplies() async throws {
        try await withMigrations(["0001_a.sql": "create table a (id int);"]) { database, admin, files in
            let role = "ferry_plain_\(UInt32.random(in: 0...UInt32.max))"
            try await admin.execute("create role \(role) login nosuperuser nobypassrls")
            try await admin.execute("grant all on database \(database.name) to \(role)")
            do {
                let plain = try await PostgresClient.connect(
                    PostgresConfiguration(try database.url(user: role)))
                do {
                    try await files.migrator.migrate(plain)
                    Issue.record("a role without BYPASSRLS migrated")
                } catch let error as MigrationError {
                    #expect(error.description.contains("BYPASSRLS"))
                    #expect(error.description.contains(role))
                }
                await plain.close()
                #expect(try await !tableExists(admin, "a"))
            }
            try await admin.execute("drop owned by \(role); drop role \(role)")
        }
    }

    /// The owner role docs/OPERATIONS.md names ("Who runs it": `BYPASSRLS` and
    /// `CREATEROLE`, not a superuser) migrates Ferry and both example apps, and the
    /// functions that delete for good do so when it owns them.
    @Test func anOwnerThatIsNotASuperuserMigratesEverything() async throws {
        try await withMigrations([:]) { database, admin, _ in
            let owner = "ferry_owner_\(UInt32.random(in: 0...UInt32.max))"
            try await admin.execute("create role \(owner) login createrole bypassrls nosuperuser")
            try await admin.execute("alter database \(database.name) owner to \(owner)")
            let client = try await PostgresClient.connect(PostgresConfiguration(try database.url(user: owner)))
            do {
                try await Migrator(
                    sqlRoot: Self.sqlRoot,
                    extraDirectories: [MigratedDatabase.example("puzzle"), MigratedDatabase.example("tasks")]
                ).migrate(client)
                #expect(try await tableExists(admin, "public.tasks"))
                // The purge runs as the owner, and a tombstone it removes is gone for good.
                let user = try await admin.query("insert into ferry.users default values returning id::text")[0, 0]
                try await admin.execute(
                    """
                    insert into public.tasks (id, user_id, title, _deleted) values ('gone', '\(user ?? "")', 't', true)
                    """)
                let purged = try await client.query("select ferry.purge_tombstones(interval '0 s', 100)")[0, 0]
                #expect(purged == "1")
                #expect(try await admin.query("select count(*) from public.tasks")[0, 0] == "0")
                #expect(
                    try await client.query("select coalesce(current_setting('ferry.hard_delete', true), '')")[0, 0]
                        == "", "put back once the purge is done")
            } catch {
                await client.close()
                throw error
            }
            await client.close()
            try await admin.execute(
                """
                alter database \(database.name) owner to current_user;
                reassign owned by \(owner) to current_user; drop owned by \(owner); drop role \(owner)
                """)
        }
    }

    // MARK: - Applying

    @Test func applyingTwiceIsANoOp() async throws {
        let files = ["0001_a.sql": "create table a (id int);", "0002_b.sql": "create table b (id int);"]
        try await withMigrations(files) { _, client, migrations in
            let first = try await migrations.migrator.migrate(client)
            #expect(first == ["app/0001_a.sql", "app/0002_b.sql"])
            let second = try await migrations.migrator.migrate(client)
            #expect(second.isEmpty)
            #expect(try await ledger(client) == ["app/0001_a.sql", "app/0002_b.sql"])
        }
    }

    @Test func filesApplyInFileNameOrderWithOneProgressLineEach() async throws {
        let files = [
            "0002_second.sql": "insert into log values ('second');",
            "0001_first.sql": "create table log (entry text); insert into log values ('first');",
            "README.md": "not a migration",
        ]
        try await withMigrations(files) { _, client, migrations in
            let lines = Mutex<[String]>([])
            try await migrations.migrator.migrate(client) { line in lines.withLock { $0.append(line) } }
            let printed = lines.withLock { $0 }
            #expect(printed.count == 2)
            #expect(printed.first?.hasPrefix("applied app/0001_first.sql (") == true)
            #expect(printed.last?.hasSuffix(" ms)") == true)
            let log = try await client.query("select string_agg(entry, ',' order by ctid) from log")
            #expect(log[0, 0] == "first,second")
        }
    }

    @Test func ledgerRecordsTheFilesChecksum() async throws {
        let sql = "create table a (id int);\n"
        try await withMigrations(["0001_a.sql": sql]) { _, client, migrations in
            try await migrations.migrator.migrate(client)
            let checksum = try await client.query("select checksum from ferry.schema_migrations")[0, 0]
            #expect(checksum == Migration(name: "app/0001_a.sql", path: "", sql: sql).checksum)
            #expect(checksum?.count == 64)
        }
    }

    @Test func sha256MatchesAKnownDigest() {
        #expect(
            Migration(name: "x", path: "", sql: "abc").checksum
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test func editedAppliedFileIsRefusedByName() async throws {
        try await withMigrations(["0001_a.sql": "create table a (id int);"]) { _, client, migrations in
            try await migrations.migrator.migrate(client)
            try migrations.write("0001_a.sql", "create table a (id bigint);")
            try migrations.write("0002_b.sql", "create table b (id int);")
            let error = await #expect(throws: MigrationError.self) { try await migrations.migrator.migrate(client) }
            #expect(error?.migrationName == "app/0001_a.sql")
            #expect(error?.description.contains("app/0001_a.sql was changed after it was applied") == true)
            #expect(try await tableExists(client, "b") == false, "nothing runs once a change is found")
        }
    }

    @Test func failingFileRollsBackAloneAndStopsTheRun() async throws {
        let files = [
            "0001_a.sql": "create table a (id int);",
            "0002_b.sql": "create table b (id int);\n\ninsert into missing_table values (1);\n",
            "0003_c.sql": "create table c (id int);",
        ]
        try await withMigrations(files) { _, client, migrations in
            let error = await #expect(throws: MigrationError.self) { try await migrations.migrator.migrate(client) }
            #expect(error?.migrationName == "app/0002_b.sql")
            let description = error?.description ?? ""
            #expect(description.contains("app/0002_b.sql failed"))
            #expect(description.contains("relation \"missing_table\" does not exist"))
            #expect(description.contains("SQLSTATE 42P01"))
            #expect(try await ledger(client) == ["app/0001_a.sql"])
            #expect(try await tableExists(client, "a"))
            #expect(try await tableExists(client, "b") == false, "the failing file rolled back")
            #expect(try await tableExists(client, "c") == false, "the run stopped")
            // The session is usable and the lock released: fixing the file lets the run go on.
            try migrations.write("0002_b.sql", "create table b (id int);")
            #expect(try await migrations.migrator.migrate(client) == ["app/0002_b.sql", "app/0003_c.sql"])
        }
    }

    @Test func twoMigratorsAtOnceApplyEachFileExactlyOnce() async throws {
        // Plain `create table` fails when run twice. The test holds the migrators' lock
        // until both wait for it, so both are there at once, then lets them go.
        let files = [
            "0001_a.sql": "create table a (id int);",
            "0002_b.sql": "create table b (id int);",
            "0003_c.sql": "create table c (id int);",
        ]
        try await withMigrations(files) { database, client, migrations in
            let other = try await database.connect()
            let holder = try await database.connect()
            let key = String(Migrator.advisoryLockKey)
            _ = try await holder.query("select pg_advisory_lock($1::bigint)", [key])
            let migrator = migrations.migrator
            async let first = migrator.migrate(client)
            async let second = migrator.migrate(other)
            do {
                try await holder.waitForBackends(blockedBy: await holder.backendPID(), count: 2)
                _ = try await holder.query("select pg_advisory_unlock($1::bigint)", [key])
            } catch {
                await holder.close()  // lets the migrators finish, so the task group can end
                throw error
            }
            let applied = try await first + second
            await holder.close()
            await other.close()
            #expect(applied.sorted() == ["app/0001_a.sql", "app/0002_b.sql", "app/0003_c.sql"])
            #expect(try await ledger(client).count == 3)
        }
    }

    @Test func migratorsOfDifferentDatabasesDoNotWaitForEachOther() async throws {
        // Advisory locks are per database: a lock held in another database must not block.
        try await withMigrations(["0001_a.sql": "create table a (id int);"]) { _, client, migrations in
            try await TestDatabase.with(prefix: "ferry_migrator") { otherDatabase in
                let other = try await otherDatabase.connect()
                _ = try await other.query("select pg_advisory_lock($1::bigint)", [String(Migrator.advisoryLockKey)])
                let applied = try await migrations.migrator.migrate(client)
                await other.close()
                #expect(applied == ["app/0001_a.sql"])
            }
        }
    }

    // MARK: - Repeatable files

    @Test func functionsFilesApplyAfterTheirDirectorysNumberedFilesInFileNameOrder() async throws {
        let files = [
            "functions/b.sql": "insert into log values ('functions/b');",
            "functions/a.sql": "insert into log values ('functions/a');",
            "0002_second.sql": "insert into log values ('0002');",
            "0001_first.sql": "create table log (entry text); insert into log values ('0001');",
        ]
        try await withMigrations(files) { _, client, migrations in
            let other = try MigrationFiles(["0001_other.sql": "insert into log values ('other');"], label: "other")
            defer { other.remove() }
            let migrator = Migrator(directories: [
                MigrationDirectory(path: migrations.directory.path), MigrationDirectory(path: other.directory.path),
            ])
            let applied = try await migrator.migrate(client)
            #expect(
                applied == [
                    "app/0001_first.sql", "app/0002_second.sql", "app/functions/a.sql", "app/functions/b.sql",
                    "other/0001_other.sql",
                ])
            let log = try await client.query("select string_agg(entry, ',' order by ctid) from log")
            #expect(log[0, 0] == "0001,0002,functions/a,functions/b,other")
            #expect(try await migrator.migrate(client).isEmpty, "unchanged files are not applied again")
        }
    }

    @Test func aChangedFunctionsFileIsAppliedAgainAndRecordedWithItsNewChecksum() async throws {
        let files = [
            "0001_a.sql": "create table a (id int);",
            "functions/f.sql": "create or replace function f() returns int language sql as $$ select 1 $$;",
            "functions/g.sql": "create or replace function g() returns int language sql as $$ select 10 $$;",
        ]
        try await withMigrations(files) { _, client, migrations in
            try await migrations.migrator.migrate(client)
            let changed = "create or replace function f() returns int language sql as $$ select 2 $$;"
            try migrations.write("functions/f.sql", changed)
            let plan = try await migrations.migrator.plan(client)
            #expect(plan.statusLines[1].hasPrefix("changed  app/functions/f.sql  applied 20"))
            #expect(plan.statusLines[1].hasSuffix(", will re-apply"))
            #expect(plan.statusLines[2].hasPrefix("applied  app/functions/g.sql  20"))
            #expect(plan.statusLines.last == "2 applied, 0 pending, 0 changed, 1 to re-apply")
            #expect(plan.dryRunLines == ["would re-apply app/functions/f.sql"])
            #expect(plan.refusal == nil, "a changed functions file is not refused")

            let lines = Mutex<[String]>([])
            let applied = try await migrations.migrator.migrate(client) { line in lines.withLock { $0.append(line) } }
            #expect(applied == ["app/functions/f.sql"])
            #expect(lines.withLock { $0 }.first?.hasPrefix("re-applied app/functions/f.sql (") == true)
            #expect(try await client.query("select f(), g()")[0, 0] == "2")
            let checksum = try await client.query(
                "select checksum from ferry.schema_migrations where name = 'app/functions/f.sql'")[0, 0]
            #expect(checksum == Migration(name: "", path: "", sql: changed).checksum)
            #expect(try await migrations.migrator.plan(client).pending.isEmpty)
        }
    }

    @Test func aFailingFunctionsFileRollsBackWithTheOtherFunctionsFilesOfTheRun() async throws {
        let files = [
            "0001_a.sql": "create table a (id int);",
            "functions/f.sql": "create function f() returns int language sql as $$ select 1 $$;",
            "functions/g.sql": "create function g() returns int language sql as $$ select missing_column from a $$;",
        ]
        try await withMigrations(files) { _, client, migrations in
            let error = await #expect(throws: MigrationError.self) { try await migrations.migrator.migrate(client) }
            #expect(error?.migrationName == "app/functions/g.sql")
            #expect(error?.description.contains("with the other repeatable files of this run") == true)
            #expect(error?.description.contains("SQLSTATE 42703") == true)
            let ledger = try await ledger(client)
            #expect(ledger == ["app/0001_a.sql"], "the numbered file before stays applied")
            #expect(try await client.query("select to_regproc('f') is null")[0, 0] == "t", "f.sql rolled back")
        }
    }

    @Test func aGeneratedSchemaFileIsNeverApplied() async throws {
        let files = ["0001_a.sql": "create table a (id int);", "schema.sql": "create table from_the_dump (id int);"]
        try await withMigrations(files) { _, client, migrations in
            let applied = try await migrations.migrator.migrate(client)
            #expect(applied == ["app/0001_a.sql"])
            #expect(try await tableExists(client, "from_the_dump") == false)
        }
    }

    // MARK: - A database made by an earlier version

    /// Ledger rows of numbered files that Ferry's own directory does not have are an
    /// earlier version's history: the run refuses before applying anything, saying what
    /// to do. A missing functions file is only reported.
    @Test func aDatabaseMigratedByAnEarlierVersionOfFerryIsRefusedSayingToResetIt() async throws {
        try await withMigrations(["0001_a.sql": "create table a (id int);"], label: "ferry") { _, client, migrations in
            let migrator = Migrator(directories: [MigrationDirectory(path: migrations.directory.path)])
            try await migrator.migrate(client)
            _ = try await client.query(
                "insert into ferry.schema_migrations (name, checksum) values ('ferry/functions/gone.sql', 'x')")
            try migrations.write("0002_b.sql", "create table b (id int);")
            #expect(try await migrator.plan(client).refusal == nil, "a functions file that is gone is not refused")

            _ = try await client.query(
                "insert into ferry.schema_migrations (name, checksum) values ('ferry/0002_old_history.sql', 'x')")
            let plan = try await migrator.plan(client)
            #expect(plan.earlierHistory == ["ferry/0002_old_history.sql"])
            #expect(!plan.historyIsNewer, "0002_b.sql is not applied: an earlier history, not a newer one")
            #expect(plan.statusLines.contains { $0.hasPrefix("missing  ferry/0002_old_history.sql  applied 20") })
            #expect(plan.statusLines.last?.contains("ferry db reset") == true, "\(plan.statusLines)")
            let error = await #expect(throws: MigrationError.self) { try await migrator.migrate(client) }
            #expect(error?.migrationName == "ferry/0002_old_history.sql")
            #expect(error?.description.contains("migrated by an earlier version of Ferry") == true)
            #expect(error?.description.contains("`ferry db reset`") == true)
            #expect(try await tableExists(client, "b") == false, "nothing applies")
        }
    }

    /// A rollback: an older binary meets a ledger that has every one of its numbered
    /// files and more after them. It refuses, saying a newer version migrated it and that
    /// the older `ferry serve` serves it as it is; nothing applies.
    @Test func aDatabaseMigratedByANewerVersionIsRefusedSayingToServeItAsItIs() async throws {
        try await withMigrations(["0001_a.sql": "create table a (id int);"], label: "ferry") { _, client, migrations in
            let migrator = Migrator(directories: [MigrationDirectory(path: migrations.directory.path)])
            try await migrator.migrate(client)
            _ = try await client.query(
                "insert into ferry.schema_migrations (name, checksum) values ('ferry/0002_newer.sql', 'x')")
            try migrations.write(
                "functions/f.sql", "create function public.f() returns int language sql as 'select 1';")
            let plan = try await migrator.plan(client)
            #expect(plan.historyIsNewer)
            let error = await #expect(throws: MigrationError.self) { try await migrator.migrate(client) }
            #expect(
                error?.description.contains("migrated by a newer version of Ferry") == true,
                "\(String(describing: error))")
            #expect(error?.description.contains("Rollback") == true)
            #expect(
                try await client.query("select to_regprocedure('public.f()') is null")[0, 0] == "t", "nothing applies")
        }
    }

    @Test func rowsOfAnotherDirectoryWhoseFileIsGoneAreOnlyReported() async throws {
        try await withMigrations(["0001_a.sql": "create table a (id int);"]) { _, client, migrations in
            try await migrations.migrator.migrate(client)
            _ = try await client.query(
                "insert into ferry.schema_migrations (name, checksum) values ('app/0000_gone.sql', 'x')")
            try migrations.write("0002_b.sql", "create table b (id int);")
            #expect(try await migrations.migrator.migrate(client) == ["app/0002_b.sql"])
        }
    }

    // MARK: - Status and dry run

    @Test func statusAndDryRunReportWithoutChangingAnything() async throws {
        let files = ["0001_a.sql": "create table a (id int);", "0002_b.sql": "create table b (id int);"]
        try await withMigrations(files) { _, client, migrations in
            let before = try await migrations.migrator.plan(client)
            #expect(
                before.statusLines == [
                    "pending  app/0001_a.sql", "pending  app/0002_b.sql", "0 applied, 2 pending, 0 changed",
                ])
            #expect(before.dryRunLines == ["would apply app/0001_a.sql", "would apply app/0002_b.sql"])
            #expect(try await tableExists(client, "ferry.schema_migrations") == false, "a dry run creates nothing")

            try migrations.delete("0002_b.sql")
            try await migrations.migrator.migrate(client)
            try migrations.write("0002_b.sql", "create table b (id int);")
            let partial = try await migrations.migrator.plan(client)
            #expect(partial.dryRunLines == ["would apply app/0002_b.sql"])
            #expect(partial.statusLines[0].hasPrefix("applied  app/0001_a.sql  20"))
            #expect(partial.statusLines[1] == "pending  app/0002_b.sql")

            try await migrations.migrator.migrate(client)
            try migrations.write("0001_a.sql", "create table a (id bigint);")
            try migrations.delete("0002_b.sql")
            let drifted = try await migrations.migrator.plan(client)
            #expect(drifted.statusLines[0].hasPrefix("changed  app/0001_a.sql  applied 20"))
            #expect(drifted.statusLines[1].hasPrefix("missing  app/0002_b.sql  applied 20"))
            #expect(drifted.statusLines[2] == "0 applied, 0 pending, 1 changed")
            #expect(drifted.dryRunLines == ["nothing to apply (0 applied)"])
        }
    }

    // MARK: - Ferry's own migrations

    @Test func ferryMigrationsCreateTheRolesWithTheRightAttributes() async throws {
        try await withMigrations([:]) { _, client, migrations in
            let migrator = Migrator(sqlRoot: Self.sqlRoot, extraDirectories: [migrations.directory.path])
            let applied = try await migrator.migrate(client)
            #expect(applied.contains("ferry/0001_roles.sql"))
            let roles = try await client.query(
                """
                select rolname, rolcanlogin, rolsuper, rolbypassrls, rolcreatedb, rolcreaterole
                from pg_roles where rolname in ('ferry_gateway', 'ferry_client') order by rolname
                """)
            #expect(roles.count == 2)
            #expect(roles[0, 0] == "ferry_client")
            #expect(
                [roles[0, 1], roles[0, 2], roles[0, 3]] == ["f", "f", "f"],
                "ferry_client: NOLOGIN NOSUPERUSER NOBYPASSRLS")
            #expect(roles[1, 0] == "ferry_gateway")
            #expect(
                [roles[1, 1], roles[1, 2], roles[1, 3], roles[1, 4], roles[1, 5]] == ["t", "f", "f", "f", "f"],
                "ferry_gateway: LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE")
            let privileges = try await client.query(
                """
                select pg_has_role('ferry_gateway', 'ferry_client', 'member'),
                       has_schema_privilege('ferry_client', 'ferry', 'usage'),
                       has_schema_privilege('ferry_client', 'ferry', 'create'),
                       has_table_privilege('ferry_client', 'ferry.schema_migrations', 'select'),
                       (select count(*) from pg_class where relowner = 'ferry_gateway'::regrole),
                       has_table_privilege('ferry_gateway', 'ferry.schema_migrations', 'select'),
                       has_table_privilege('ferry_gateway', 'ferry.schema_migrations', 'insert, update, delete')
                """)
            #expect(privileges[0, 0] == "t", "the gateway may switch to ferry_client")
            #expect(privileges[0, 1] == "t")
            #expect(privileges[0, 2] == "f")
            #expect(privileges[0, 3] == "f", "requests may not read the ledger")
            #expect(privileges[0, 4] == "0", "ferry_gateway owns nothing")
            #expect(privileges[0, 5] == "t", "the gateway reads the ledger for its schema check")
            #expect(privileges[0, 6] == "f", "and only reads it")
        }
    }

    /// `ferry serve` refuses a database whose `ferry.schema_version()` is below
    /// `Ferry.requiredSchemaVersion`: the two move together, or a binary would serve SQL
    /// older than it relies on (or refuse its own).
    @Test func aFreshlyMigratedDatabaseIsAtTheBinarysSchemaVersionForTheGatewayAlone() async throws {
        try await withMigrations([:]) { _, client, _ in
            try await Migrator(sqlRoot: Self.sqlRoot, extraDirectories: []).migrate(client)
            let version = try await client.query(
                """
                select ferry.schema_version(),
                       has_function_privilege('ferry_gateway', 'ferry.schema_version()', 'execute'),
                       has_function_privilege('ferry_client', 'ferry.schema_version()', 'execute')
                """)
            #expect(
                version[0, 0] == String(Ferry.requiredSchemaVersion),
                "sql/ferry/functions/version.sql and Ferry.requiredSchemaVersion (Sources/FerryGateway/Ferry.swift) must say the same version"
            )
            #expect(version[0, 1] == "t", "the gateway's schema check calls it")
            #expect(version[0, 2] == "f", "requests do not")
        }
    }

    /// sql/ferry/schema.sql is what sql/ferry makes: a fresh database migrated with it
    /// alone, dumped and normalised by sql/schema.sh with the server's own pg_dump, is the
    /// file to the byte.
    @Test func theCheckedInSchemaIsWhatSqlFerryMakes() async throws {
        try await withMigrations([:]) { database, client, _ in
            try await Migrator(sqlRoot: Self.sqlRoot, extraDirectories: []).migrate(client)
            let output = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-schema-\(UUID()).sql")
            let errors = output.path + ".err"
            defer {
                try? FileManager.default.removeItem(at: output)
                try? FileManager.default.removeItem(atPath: errors)
            }
            var environment = ProcessInfo.processInfo.environment
            environment["PG_DUMP"] = try await database.serverProgram("pg_dump")
            let child = try ChildProcess(
                "/bin/bash", [Self.sqlRoot + "/schema.sh", "--print", database.url], environment: environment,
                output: output.path, errors: errors)
            let (ending, killed) = child.wait(seconds: 120)
            let problems = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
            try #require(ending == .exited(0) && !killed, "sql/schema.sh --print failed: \(problems)")
            let dumped = try String(contentsOf: output, encoding: .utf8).components(separatedBy: "\n")
            let file = try String(contentsOfFile: Self.sqlRoot + "/ferry/schema.sql", encoding: .utf8)
                .components(separatedBy: "\n")
            if dumped != file {
                let line =
                    zip(dumped, file).enumerated().first { $0.element.0 != $0.element.1 }?.offset
                    ?? min(dumped.count, file.count)
                Issue.record(
                    """
                    sql/ferry/schema.sql no longer matches what sql/ferry's migrations make: run `make schema` \
                    (sql/schema.sh) and commit the file. First difference, line \(line + 1): \
                    made "\(line < dumped.count ? dumped[line] : "(end)")", file "\(line < file.count ? file[line] : "(end)")"
                    """)
            }
        }
    }

    /// Each function of schema ferry has one definition under sql/, and none is named
    /// after a migration (no layered `register_table_0005`): the generated pull readers
    /// (`pull_rows_<table oid>`) are the only names with a number.
    @Test func eachFerryFunctionIsDefinedInOneFileUnderSqlAndNoneIsNamedAfterAMigration() async throws {
        var definitions: [String: [String]] = [:]
        let root = URL(fileURLWithPath: Self.sqlRoot)
        let files =
            FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil)?
            .compactMap { ($0 as? URL)?.path }.filter { $0.hasSuffix(".sql") && !$0.hasSuffix("/schema.sql") } ?? []
        let definition = try Regex(#"create (?:or replace )?function ferry\.([a-z_0-9]+)"#).ignoresCase()
        for file in files {
            let text = try String(contentsOfFile: file, encoding: .utf8)
            for match in text.matches(of: definition) {
                definitions[String(match.output[1].substring ?? ""), default: []].append(file)
            }
        }
        let duplicated = definitions.filter { $0.value.count > 1 }
        #expect(duplicated.isEmpty, "defined more than once: \(duplicated)")
        try await withMigrations([:]) { _, client, _ in
            try await Migrator(sqlRoot: Self.sqlRoot, extraDirectories: []).migrate(client)
            let functions = try await client.query(
                "select proname::text from pg_proc where pronamespace = 'ferry'::regnamespace order by 1")
            let names = (0..<functions.count).compactMap { functions[$0, 0] }
            #expect(names.count > 40)
            #expect(names.filter { $0.contains(/_[0-9]+$/) }.isEmpty, "\(names)")
            #expect(names.filter { definitions[$0] == nil }.isEmpty, "functions without a definition under sql/")
        }
    }

    /// Roles are cluster-wide: 0001 (with fresh role names) migrates four databases while
    /// another session holds both roles created in a transaction it has not committed.
    /// Every migrator's CREATE ROLE waits on that transaction (checked before it commits),
    /// so each then meets the role made under it: unique_violation on ferry_client, which
    /// it waited for, and duplicate_object on ferry_gateway, committed by then.
    @Test func roleCreationIsSafeWhenManyDatabasesMigrateAtOnce() async throws {
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let client = "ferry_client_\(suffix)"
        let gateway = "ferry_gateway_\(suffix)"
        let source = try String(
            contentsOfFile: Self.sqlRoot + "/ferry/0001_roles.sql", encoding: .utf8)
        let sql = source.replacingOccurrences(of: "ferry_client", with: client)
            .replacingOccurrences(of: "ferry_gateway", with: gateway)
        let files = try MigrationFiles(["0001_roles.sql": sql])
        defer { files.remove() }
        var created: [TestDatabase] = []
        for _ in 0..<4 { created.append(try await TestDatabase.create(prefix: "ferry_migrator")) }
        let databases = created
        let maintenance = try await PostgresClient.connect(try TestDatabase.maintenanceConfiguration())
        let holder = try await PostgresClient.connect(try TestDatabase.maintenanceConfiguration())
        try await holder.execute(
            """
            begin;
            create role \(client) nologin nobypassrls;
            create role \(gateway) login nosuperuser nobypassrls nocreatedb nocreaterole
            """)
        let migrator = files.migrator
        async let migrations = withTaskGroup(of: Result<[String], any Error>.self) { group in
            for database in databases {
                group.addTask {
                    do {
                        let client = try await database.connect()
                        let applied = try await migrator.migrate(client)
                        await client.close()
                        return .success(applied)
                    } catch {
                        return .failure(error)
                    }
                }
            }
            var outcomes: [Result<[String], any Error>] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes
        }
        let names = databases.map(\.name)
        let waited = try await eventuallyHolds(seconds: 30) {
            try await maintenance.query(
                """
                select count(*) from pg_stat_activity
                where datname = any($1::text[]) and wait_event_type = 'Lock' and wait_event = 'transactionid'
                """, ["{\(names.joined(separator: ","))}"])[0, 0] == "4"
        }
        try await holder.execute("commit")
        await holder.close()
        let outcomes = await migrations
        let roles = try await maintenance.query(
            "select count(*) from pg_roles where rolname in ($1, $2)", [client, gateway])
        let member = try await maintenance.query("select pg_has_role($1, $2, 'member')", [gateway, client])
        for database in databases { try await database.drop() }
        _ = try? await maintenance.execute("drop role if exists \(gateway), \(client)")
        await maintenance.close()
        #expect(waited, "the migrators did not all wait on the roles being created")
        for outcome in outcomes {
            #expect(throws: Never.self) { try outcome.get() }
        }
        #expect(roles[0, 0] == "2")
        #expect(member[0, 0] == "t", "0001 made \(gateway) a member of \(client)")
    }
}

extension MigrationFiles {
    /// A migrator of this one directory.
    var migrator: Migrator { Migrator(directories: [MigrationDirectory(path: directory.path)]) }
}
