import FerryGateway
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

/// `ferry migrate` as a process, as docs/OPERATIONS.md ("Migrations") describes it: the
/// order of `<sql-root>/ferry` and each `--dir`, `FERRY_MIGRATE_DIRS`, where the URL comes
/// from, `--status` and `--dry-run`, and the exit status. Each test has its own database
/// and a small SQL root of its own (a `ferry/` directory of one file), so a run takes
/// milliseconds; ``MigratorTests`` tests the migrator itself and Ferry's own SQL.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct MigrateCommandTests {
    /// A SQL root whose `ferry/` makes the table `log` and writes `ferry` into it.
    static let ferryFiles = [
        "0001_log.sql": "create table log (n serial, entry text); insert into log (entry) values ('ferry');"
    ]

    /// A SQL root whose `ferry/` holds `ferryFiles` (a test may edit them), and two
    /// directories of migrations, `first` and `second`, whose one file each writes the
    /// directory's name into `log`.
    struct Migrations {
        let ferry: MigrationFiles
        let first: MigrationFiles
        let second: MigrationFiles
        /// The `--sql-root` holding `ferry/`.
        var sqlRoot: String { ferry.directory.deletingLastPathComponent().path }
    }

    /// A fresh database and ``Migrations``; all removed afterwards.
    func withMigrations(_ body: (TestDatabase, Migrations) async throws -> Void) async throws {
        func writing(_ label: String) throws -> MigrationFiles {
            try MigrationFiles(
                ["0001_\(label).sql": "insert into log (entry) values ('\(label)');"], label: label)
        }
        let files = Migrations(
            ferry: try MigrationFiles(Self.ferryFiles, label: "ferry"), first: try writing("first"),
            second: try writing("second"))
        defer {
            for directory in [files.ferry, files.first, files.second] { directory.remove() }
        }
        try await TestDatabase.with(prefix: "ferry_migrate") { database in try await body(database, files) }
    }

    /// `ferry migrate <arguments>` with the URL in `--database-url`, nothing else set.
    func migrate(_ arguments: [String], url: String, environment: [String: String] = [:]) async throws -> FerryRun {
        try await runFerry(["migrate", "--database-url", url] + arguments, databaseURL: nil, environment: environment)
    }

    /// What the files wrote into `log`, in order.
    func log(_ database: TestDatabase) async throws -> [String] {
        let client = try await database.connect()
        let entries = try await client.query("select entry from log order by n").rows.compactMap { $0[0] }
        await client.close()
        return entries
    }

    func ledgerExists(_ database: TestDatabase) async throws -> Bool {
        let client = try await database.connect()
        let exists = try await client.query("select to_regclass('ferry.schema_migrations') is not null")[0, 0]
        await client.close()
        return exists == "t"
    }

    // MARK: - Applying

    @Test func appliesTheSQLRootsFerryThenEachDirInTheOrderGivenAndExits0() async throws {
        try await withMigrations { database, files in
            let arguments = [
                "--sql-root", files.sqlRoot, "--dir", files.second.directory.path, "--dir", files.first.directory.path,
            ]
            let run = try await migrate(arguments, url: database.url)
            #expect(run.status == 0, "\(run.errors)")
            #expect(
                run.lines.map { $0.prefix { $0 != "(" } } == [
                    "applied ferry/0001_log.sql ", "applied second/0001_second.sql ", "applied first/0001_first.sql ",
                ], "\(run.output)")
            #expect(try await log(database) == ["ferry", "second", "first"])

            let again = try await migrate(arguments, url: database.url)
            #expect(again.status == 0 && again.lines == ["migrations up to date"], "\(again.output)\(again.errors)")
            #expect(try await log(database) == ["ferry", "second", "first"])
        }
    }

    @Test func withoutDirTheDirectoriesOfFERRY_MIGRATE_DIRSApplyInTheirOrder() async throws {
        try await withMigrations { database, files in
            let run = try await migrate(
                ["--sql-root", files.sqlRoot], url: database.url,
                environment: ["FERRY_MIGRATE_DIRS": files.second.directory.path + ":" + files.first.directory.path])
            #expect(run.status == 0, "\(run.errors)")
            #expect(try await log(database) == ["ferry", "second", "first"])
        }
    }

    /// `--directory` applies the repository's `sql/directory` alone (not `sql/ferry`) to the
    /// directory's database, `--directory-database-url` else `--database-url`; `--dir` with
    /// it is a bad setting.
    @Test func directoryAppliesTheEmailDirectoryAloneToItsOwnDatabase() async throws {
        try await TestDatabase.with(prefix: "ferry_migrate_directory") { database in
            let root = TestRepository.sqlRoot
            let run = try await runFerry(
                ["migrate", "--directory", "--sql-root", root, "--database-url", "postgresql://127.0.0.1:1/none"],
                databaseURL: nil, environment: ["FERRY_DIRECTORY_MIGRATE_DATABASE_URL": database.url])
            #expect(run.status == 0, "\(run.errors)")
            #expect(
                run.lines.map { $0.prefix { $0 != "(" } } == [
                    "applied directory/0001_emails.sql ", "applied directory/functions/directory.sql ",
                ], "\(run.output)")
            let client = try await database.connect()
            let tables = try await client.query(
                "select to_regclass('directory.emails') is not null, to_regclass('ferry.users') is null")
            await client.close()
            #expect(tables[0, 0] == "t" && tables[0, 1] == "t", "the directory only")
            let again = try await migrate(["--directory", "--sql-root", root], url: database.url)
            #expect(again.status == 0 && again.lines == ["migrations up to date"], "\(again.output)\(again.errors)")
            let refused = try await migrate(["--directory", "--sql-root", root, "--dir", root], url: database.url)
            #expect(refused.status == 2, "\(refused.errors)")
        }
    }

    /// `--database-url`, else `FERRY_MIGRATE_DATABASE_URL`, else `FERRY_DATABASE_URL`:
    /// with all three naming databases that refuse connections, the failure names the
    /// one that was tried. With the one that works, the run succeeds.
    @Test func theURLIsTheFlagsThenFERRY_MIGRATE_DATABASE_URLThenFERRY_DATABASE_URL() async throws {
        try await withMigrations { database, files in
            try await withClosedPort { closed in
                let sqlRoot = files.sqlRoot
                func nowhere(_ name: String) -> String { "postgresql://nobody@127.0.0.1:\(closed)/\(name)" }
                func run(flag: String?, migrateURL: String?, databaseURL: String?) async throws -> FerryRun {
                    var environment: [String: String] = [:]
                    if let migrateURL { environment["FERRY_MIGRATE_DATABASE_URL"] = migrateURL }
                    if let databaseURL { environment["FERRY_DATABASE_URL"] = databaseURL }
                    return try await runFerry(
                        ["migrate", "--status", "--sql-root", sqlRoot] + (flag.map { ["--database-url", $0] } ?? []),
                        databaseURL: nil, environment: environment)
                }
                let all = try await run(
                    flag: nowhere("flag"), migrateURL: nowhere("migrate"), databaseURL: nowhere("any"))
                #expect(all.status == 1 && all.errors.contains("127.0.0.1:\(closed)/flag"), "\(all.errors)")
                let environment = try await run(flag: nil, migrateURL: nowhere("migrate"), databaseURL: nowhere("any"))
                #expect(
                    environment.status == 1 && environment.errors.contains(":\(closed)/migrate"),
                    "\(environment.errors)")
                let fallback = try await run(flag: nil, migrateURL: nil, databaseURL: nowhere("any"))
                #expect(fallback.status == 1 && fallback.errors.contains(":\(closed)/any"), "\(fallback.errors)")

                let flag = try await run(
                    flag: database.url, migrateURL: nowhere("migrate"), databaseURL: nowhere("any"))
                #expect(
                    flag.status == 0 && flag.lines.first == "pending  ferry/0001_log.sql",
                    "\(flag.output)\(flag.errors)")
                let migrateURL = try await run(flag: nil, migrateURL: database.url, databaseURL: nowhere("any"))
                #expect(migrateURL.status == 0, "\(migrateURL.errors)")
                let databaseURL = try await run(flag: nil, migrateURL: nil, databaseURL: database.url)
                #expect(databaseURL.status == 0, "\(databaseURL.errors)")
            }
        }
    }

    // MARK: - Looking first

    @Test func statusListsEachFileChangesNothingAndExits1OnceANumberedFileChanged() async throws {
        try await withMigrations { database, files in
            let (ferry, sqlRoot) = (files.ferry, files.sqlRoot)
            let before = try await migrate(["--status", "--sql-root", sqlRoot], url: database.url)
            #expect(before.status == 0, "\(before.errors)")
            #expect(
                before.lines == ["pending  ferry/0001_log.sql", "0 applied, 1 pending, 0 changed"], "\(before.output)")
            #expect(try await ledgerExists(database) == false, "--status changes nothing")

            #expect(try await migrate(["--sql-root", sqlRoot], url: database.url).status == 0)
            let applied = try await migrate(["--status", "--sql-root", sqlRoot], url: database.url)
            #expect(applied.status == 0 && applied.lines.first?.hasPrefix("applied  ferry/0001_log.sql  20") == true)

            try ferry.write("0001_log.sql", "create table log (n serial, entry text);")
            let changed = try await migrate(["--status", "--sql-root", sqlRoot], url: database.url)
            #expect(changed.status == 1, "\(changed.output)\(changed.errors)")
            #expect(
                changed.lines.first?.hasPrefix("changed  ferry/0001_log.sql  applied 20") == true, "\(changed.output)")
            #expect(try await log(database) == ["ferry"])
        }
    }

    @Test func dryRunListsWhatWouldApplyChangesNothingAndExits1WhenARunWouldRefuse() async throws {
        try await withMigrations { database, files in
            let (ferry, sqlRoot) = (files.ferry, files.sqlRoot)
            let before = try await migrate(["--dry-run", "--sql-root", sqlRoot], url: database.url)
            #expect(before.status == 0 && before.lines == ["would apply ferry/0001_log.sql"], "\(before.output)")
            #expect(try await ledgerExists(database) == false, "--dry-run changes nothing")

            #expect(try await migrate(["--sql-root", sqlRoot], url: database.url).status == 0)
            try ferry.write("0001_log.sql", "create table log (n serial, entry text);")
            let refused = try await migrate(["--dry-run", "--sql-root", sqlRoot], url: database.url)
            #expect(refused.status == 1, "\(refused.output)\(refused.errors)")
            #expect(
                refused.errors.contains("a real run would refuse") && refused.errors.contains("ferry/0001_log.sql"),
                "\(refused.errors)")
        }
    }

    // MARK: - Failures

    @Test func aFailingFileExits1NamingItAndItsSQLStateAndKeepsTheFilesBefore() async throws {
        try await withMigrations { database, files in
            let sqlRoot = files.sqlRoot
            let app = try MigrationFiles(
                [
                    "0001_fine.sql": "insert into log (entry) values ('fine');",
                    "0002_broken.sql": "insert into log (entry) values ('broken'); select 1 / 0;",
                    "0003_later.sql": "insert into log (entry) values ('later');",
                ], label: "app")
            defer { app.remove() }
            let run = try await migrate(["--sql-root", sqlRoot, "--dir", app.directory.path], url: database.url)
            #expect(run.status == 1, "\(run.output)")
            #expect(
                run.errors.contains("app/0002_broken.sql") && run.errors.contains("22012"), "\(run.errors)")
            #expect(try await log(database) == ["ferry", "fine"], "the failing file rolled back, the run stopped")
        }
    }

    @Test func anEditedAppliedFileExits1AndAppliesNothing() async throws {
        try await withMigrations { database, files in
            let sqlRoot = files.sqlRoot
            let app = try MigrationFiles(["0001_a.sql": "insert into log (entry) values ('a');"])
            defer { app.remove() }
            #expect(
                try await migrate(["--sql-root", sqlRoot, "--dir", app.directory.path], url: database.url).status == 0)
            try app.write("0001_a.sql", "insert into log (entry) values ('edited');")
            try app.write("0002_b.sql", "insert into log (entry) values ('b');")
            let run = try await migrate(["--sql-root", sqlRoot, "--dir", app.directory.path], url: database.url)
            #expect(run.status == 1 && run.errors.contains("app/0001_a.sql"), "\(run.output)\(run.errors)")
            #expect(try await log(database) == ["ferry", "a"], "nothing applied")
        }
    }

    @Test func anInvalidURLIsABadSettingExit2() async throws {
        let run = try await runFerry(
            ["migrate", "--sql-root", TestRepository.sqlRoot, "--database-url", "postgresql://[broken"],
            databaseURL: nil)
        #expect(run.status == 2 && run.errors.hasPrefix("ferry migrate: invalid --database-url"), "\(run.errors)")
    }
}
