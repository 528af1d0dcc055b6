import FerryGateway
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

/// The Debian package `make deb` builds (deploy/debian/build.sh): what it holds, what it
/// depends on, and that its binary runs with nothing but Debian's libraries. Built once
/// per test run and shared by the tests; `make test` builds it before the tests, so here
/// it is only checked up to date.
@Suite(.hangLimit, .tags(.process), .tagSelection) struct DebianPackageTests {
    /// The package, extracted into a temporary directory (`dpkg-deb -x`, and its control
    /// files with `dpkg-deb -e`), built once for all the tests of a run.
    struct Package: Sendable {
        /// The `.deb` file.
        let file: String
        /// Where its files were extracted: `<root>/usr/bin/ferry`, ….
        let root: String
        /// Its control files: `control`, `conffiles`, `postinst`.
        let control: String
        /// The packaged binary.
        var binary: String { root + "/usr/bin/ferry" }
    }

    /// `make deb`, at most once per run (a release build takes minutes on two cores), off
    /// the cooperative threads.
    static let package = Task { try await offload { try Self.build() } }

    static func build() throws -> Package {
        // Without the outer make's jobserver settings, whose descriptors the child does not get.
        let make = try run(
            "/usr/bin/env",
            [
                "-u", "MAKEFLAGS", "-u", "MFLAGS", "-u", "MAKELEVEL", "make", "--no-print-directory", "-C",
                TestRepository.root, "deb",
            ],
            timeout: 540)
        guard make.status == 0, let file = make.output.split(separator: "\n").last.map(String.init),
            file.hasSuffix(".deb")
        else { throw ChildProcessError(description: "make deb failed (\(make.status)):\n\(make.output)") }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-deb-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let package = Package(file: file, root: directory.path + "/root", control: directory.path + "/DEBIAN")
        for (option, target) in [("-x", package.root), ("-e", package.control)] {
            let extract = try run("/usr/bin/dpkg-deb", [option, file, target])
            guard extract.status == 0 else {
                throw ChildProcessError(description: "dpkg-deb \(option): \(extract.output)")
            }
        }
        return package
    }

    /// Runs a program to its end; its output and errors together.
    static func run(_ executable: String, _ arguments: [String], timeout: Double = 60) throws -> (
        status: Int32, output: String
    ) {
        try ChildProcess.run(executable, arguments, timeout: timeout)
    }

    /// The package's file list (`dpkg-deb -c`): path (without the leading `.`) → mode and owner.
    static func contents(_ package: Package) throws -> [String: String] {
        let list = try run("/usr/bin/dpkg-deb", ["-c", package.file])
        #expect(list.status == 0, "\(list.output)")
        var contents: [String: String] = [:]
        for line in list.output.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard let path = fields.last, path.hasPrefix("./") else { continue }
            contents[String(path.dropFirst())] = "\(fields[0]) \(fields[1])"
        }
        return contents
    }

    @Test func holdsTheBinaryFerrysSQLTheUnitsAndTheSettingsAsConffiles() async throws {
        let package = try await Self.package.value
        let contents = try Self.contents(package)
        #expect(contents["/usr/bin/ferry"] == "-rwxr-xr-x root/root", "\(contents.keys.sorted())")
        #expect(contents["/lib/systemd/system/ferry.service"] == "-rw-r--r-- root/root")
        #expect(contents["/lib/systemd/system/ferry-migrate.service"] == "-rw-r--r-- root/root")
        // Secrets go in them: not readable by others, even before the postinst's overrides apply.
        #expect(contents["/etc/ferry/ferry.env"] == "-rw-r----- root/root")
        #expect(contents["/etc/ferry/migrate.env"] == "-rw------- root/root")
        // Every file of sql/ferry, and nothing else of sql/ (the examples are not Ferry's).
        let sql = try FileManager.default.subpathsOfDirectory(atPath: TestRepository.sqlRoot + "/ferry")
            .filter { $0.hasSuffix(".sql") }
        #expect(sql.contains("0001_roles.sql") && sql.contains("functions/version.sql"))
        let packagedSQL = contents.keys.filter { $0.hasPrefix("/usr/share/ferry/sql/") && !$0.hasSuffix("/") }
        #expect(packagedSQL.allSatisfy { $0.hasSuffix(".sql") }, "\(packagedSQL.sorted())")
        #expect(Set(packagedSQL) == Set(sql.map { "/usr/share/ferry/sql/ferry/" + $0 }))

        let conffiles = try String(contentsOfFile: package.control + "/conffiles", encoding: .utf8)
        #expect(conffiles.split(separator: "\n") == ["/etc/ferry/ferry.env", "/etc/ferry/migrate.env"])
        let postinst = package.control + "/postinst"
        #expect(FileManager.default.isExecutableFile(atPath: postinst))
        let syntax = try Self.run("/bin/sh", ["-n", postinst])
        #expect(syntax.status == 0, "\(syntax.output)")
        let script = try String(contentsOfFile: postinst, encoding: .utf8)
        #expect(script.contains("useradd --system") && script.contains("getent passwd ferry"))
        #expect(script.contains("dpkg-statoverride --update --add root ferry 0640 /etc/ferry/ferry.env"))
        #expect(script.contains("dpkg-statoverride --update --add root root 0600 /etc/ferry/migrate.env"))
    }

    /// The gateway's unit gets ferry.env alone and can never open migrate.env, which holds
    /// the owner's login (it bypasses Row Level Security); the migrations' unit gets it,
    /// as a user of its own. What systemd itself enforces is not run here (no systemd);
    /// `systemd-analyze verify` reads both units as systemd 252 would.
    @Test func theGatewaysUnitNeverReadsTheOwnersLogin() async throws {
        let package = try await Self.package.value
        func lines(_ path: String) throws -> [String] {
            try String(contentsOfFile: package.root + path, encoding: .utf8).split(separator: "\n").map(String.init)
                .filter { !$0.hasPrefix("#") }
        }
        let serve = try lines("/lib/systemd/system/ferry.service")
        #expect(serve.filter { $0.hasPrefix("EnvironmentFile=") } == ["EnvironmentFile=/etc/ferry/ferry.env"])
        #expect(serve.contains("InaccessiblePaths=-/etc/ferry/migrate.env") && serve.contains("User=ferry"))
        #expect(!serve.contains { $0.hasPrefix("ExecStart") && $0.contains("migrate") }, "no migrations with ferry.env")
        let migrate = try lines("/lib/systemd/system/ferry-migrate.service")
        #expect(migrate.filter { $0.hasPrefix("EnvironmentFile=") } == ["EnvironmentFile=/etc/ferry/migrate.env"])
        #expect(migrate.contains("DynamicUser=yes") && !migrate.contains { $0.hasPrefix("User=") })
        #expect(migrate.contains("ExecStart=/usr/bin/ferry migrate"))
        #expect(!(try lines("/etc/ferry/ferry.env")).contains { $0.hasPrefix("FERRY_MIGRATE") })
        #expect((try lines("/etc/ferry/migrate.env")).contains { $0.hasPrefix("FERRY_MIGRATE_DATABASE_URL=") })

        // systemd-analyze resolves the units' dependencies under --root: the host's targets.
        let units = package.root + "/lib/systemd/system"
        for target in try FileManager.default.contentsOfDirectory(atPath: "/lib/systemd/system")
        where target.hasSuffix(".target") && !FileManager.default.fileExists(atPath: units + "/" + target) {
            try FileManager.default.copyItem(atPath: "/lib/systemd/system/" + target, toPath: units + "/" + target)
        }
        let verify = try Self.run(
            "/usr/bin/systemd-analyze",
            ["verify", "--root=\(package.root)", units + "/ferry.service", units + "/ferry-migrate.service"])
        #expect(verify.status == 0 && verify.output.isEmpty, "\(verify.output)")
    }

    @Test func versionIsTheBinarysAndDependsNamesThePackageOfEachLibraryItLinks() async throws {
        let package = try await Self.package.value
        let control = try Self.run("/usr/bin/dpkg-deb", ["-f", package.file, "Package", "Version", "Depends"])
        #expect(control.status == 0, "\(control.output)")
        let fields = Dictionary(
            control.output.split(separator: "\n").compactMap { line -> (String, String)? in
                guard let colon = line.firstIndex(of: ":") else { return nil }
                return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
            }, uniquingKeysWith: { first, _ in first })
        #expect(fields["Package"] == "ferry")
        #expect(fields["Version"] == Ferry.version)
        let depends = Set(
            (fields["Depends"] ?? "").split(separator: ",").compactMap {
                $0.split(separator: " ", omittingEmptySubsequences: true).first.map(String.init)
            })

        // The libraries the binary names (NEEDED), where the loader finds them, and the
        // packages that installed those files: exactly what Depends lists.
        let needed = try Self.run("/usr/bin/readelf", ["-d", package.binary]).output.split(separator: "\n").compactMap {
            line -> String? in
            guard line.contains("(NEEDED)"), let open = line.lastIndex(of: "["), let close = line.lastIndex(of: "]")
            else { return nil }
            return String(line[line.index(after: open)..<close])
        }
        #expect(needed.contains("libpq.so.5") && needed.contains("libuv.so.1"), "\(needed)")
        let paths = try Self.loadedLibraries(package.binary)
        var owners = Set<String>()
        for library in needed {
            let path = try #require(paths[library], "ldd does not show \(library): \(paths)")
            owners.insert(try #require(try Self.owningPackage(path), "no package installed \(path)"))
        }
        #expect(depends == owners, "Depends: \(fields["Depends"] ?? "")")
        for library in ["libpq5", "libuv1", "libsodium23", "libssl3", "libcurl4", "libwslay1", "libhttp-parser2.9"] {
            #expect(depends.contains(library), "Depends: \(fields["Depends"] ?? "")")
        }
    }

    @Test func packagedBinaryNeedsNoToolchainAndPrintsItsVersion() async throws {
        let package = try await Self.package.value
        let ldd = try Self.run("/usr/bin/ldd", [package.binary])
        #expect(ldd.status == 0, "\(ldd.output)")
        #expect(!ldd.output.contains("not found") && !ldd.output.contains("/opt/swift"), "\(ldd.output)")
        #expect(!ldd.output.contains("libswift") && !ldd.output.contains("libFoundation"), "\(ldd.output)")
        let version = try Self.run(package.binary, ["version"])
        #expect(version.status == 0)
        #expect(version.output.hasPrefix("ferry \(Ferry.version) (commit "), "\(version.output)")
        #expect(version.output.contains("schema version \(Ferry.requiredSchemaVersion) or newer"))
    }

    /// The packaged binary finds the packaged SQL with no `--sql-root`, from any directory.
    @Test(.tags(.database)) func packagedBinaryMigratesFromThePackagedSQL() async throws {
        let package = try await Self.package.value
        let help = try Self.run(package.binary, ["help", "migrate"])
        #expect(help.output.contains("(default: \(package.root)/usr/share/ferry/sql)"), "\(help.output)")
        try await TestDatabase.with(prefix: "ferry_deb") { database in
            // From /, where no sql/ is: only the default can find Ferry's migrations.
            let migrate = try Self.run(
                "/usr/bin/env",
                [
                    "-C", "/", "-i", "PATH=/usr/bin:/bin", "FERRY_MIGRATE_DATABASE_URL=\(database.url)", package.binary,
                    "migrate",
                ],
                timeout: 300)
            #expect(migrate.status == 0, "\(migrate.output)")
            #expect(migrate.output.contains("applied ferry/0001_roles.sql"), "\(migrate.output)")
            let client = try await database.connect()
            let version = try await client.query("select ferry.schema_version()")[0, 0]
            await client.close()
            #expect(version == String(Ferry.requiredSchemaVersion))
        }
    }

    /// docs/DEPLOY.md's commands, every `sh` block in order, against the package in a
    /// throwaway root and a throwaway PostgreSQL cluster (deploy/check.sh says how).
    @Test func everyCommandOfTheDeploymentGuideRuns() async throws {
        let package = try await Self.package.value
        let guide = try String(contentsOfFile: TestRepository.root + "/docs/DEPLOY.md", encoding: .utf8)
        let blocks = guide.split(separator: "\n").filter { $0 == "```sh" }.count
        #expect(blocks >= 8, "the guide's steps are sh blocks")
        let check = try await offload {
            try Self.run("/bin/bash", [TestRepository.root + "/deploy/check.sh", package.file], timeout: 400)
        }
        #expect(check.status == 0, "\(check.output)")
        #expect(
            check.output.hasSuffix(
                "ran the \(blocks) blocks of docs/DEPLOY.md; the gateway serves, without the owner's login\n"),
            "\(check.output)")
    }

    /// What `ldd` shows: library name → the file the loader would map.
    static func loadedLibraries(_ binary: String) throws -> [String: String] {
        var paths: [String: String] = [:]
        for line in try run("/usr/bin/ldd", [binary]).output.split(separator: "\n") {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if fields.count >= 3, fields[1] == "=>" {
                paths[String(fields[0])] = String(fields[2])
            } else if let path = fields.first, path.hasPrefix("/") {
                paths[(String(path) as NSString).lastPathComponent] = String(path)
            }
        }
        return paths
    }

    /// The installed package that holds `path` (`dpkg -S`), trying the names a merged
    /// /usr gives it: `/lib/…` may be registered as `/usr/lib/…`, or under its target.
    static func owningPackage(_ path: String) throws -> String? {
        let resolved = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        for candidate in [path, "/usr" + path, resolved, "/usr" + resolved] {
            let search = try run("/usr/bin/dpkg", ["-S", candidate])
            if search.status == 0, let line = search.output.split(separator: "\n").first,
                let name = line.split(separator: ":").first
            {
                return String(name)
            }
        }
        return nil
    }
}
