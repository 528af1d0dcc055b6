// swift-tools-version:6.0
import PackageDescription

/// The commit `ferry version` names: FERRY_COMMIT from the environment, which the
/// Makefile sets from git (SwiftPM evaluates the manifest again when it changes; its
/// own git information would be cached and go stale). Without it, "": unknown.
let commit = String((Context.environment["FERRY_COMMIT"] ?? "").filter { $0.isLetter || $0.isNumber || $0 == "-" })

/// Ferry: a self-hosted sync gateway for offline-first apps.
///
/// Modules depend one way, bottom to top; docs/ARCHITECTURE.md ("Modules") has the map:
///
///     ferry                      the CLI
///     FerryGateway               the application: App/, API/, Accounts/, Sync/,
///                                Realtime/, Observability/, Migrations/
///     FerryAuth                  tokens, crypto, password hashing, rate limits: no
///                                database, no HTTP
///     FerryHTTP  FerryPostgres   HTTP/1.1 server, streams, a WebSocket client; async libpq
///     FerryCommandLine           flags and FERRY_* variables, commands, --help
///     FerryJSON                  JSON written and read on bytes
///     FerryLoop                  event loops, TCP, worker threads, blocking hand-off
///     C shims                    CLibUV CLibPQ CHTTPParser CWslay CSodium CCrypto CCurl CMalloc;
///                                CFerryBuild (the build's commit), the one with code
///
/// FerryLoad and ferry-load, the load generator, sit beside the gateway on FerryLoop,
/// FerryHTTP, FerryPostgres and FerryCommandLine. FerryClient, the Swift SDK for apps,
/// and ferry-demo stand apart, on Foundation and CSQLite only.
let package = Package(
    name: "Ferry",
    platforms: [.macOS(.v15), .iOS(.v17)],
    products: [
        .executable(name: "ferry", targets: ["ferry"]),
        .executable(name: "ferry-load", targets: ["ferry-load"]),
        .library(name: "FerryGateway", targets: ["FerryGateway"]),
        /// The Swift SDK an app adds: Foundation and SQLite only (docs/CLIENT.md).
        .library(name: "FerryClient", targets: ["FerryClient"]),
        .executable(name: "ferry-demo", targets: ["ferry-demo"]),
    ],
    targets: [
        // MARK: - C libraries from Debian
        .systemLibrary(name: "CLibUV", pkgConfig: "libuv", providers: [.apt(["libuv1-dev"])]),
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CHTTPParser", providers: [.apt(["libhttp-parser-dev"])]),
        .systemLibrary(name: "CWslay", providers: [.apt(["libwslay-dev"])]),
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        // No pkgConfig: Apple platforms ship sqlite3.h and libsqlite3 without a .pc file.
        .systemLibrary(name: "CSQLite", providers: [.apt(["libsqlite3-dev"])]),
        /// glibc's allocator settings (`mallopt`, `malloc_trim`), from libc6-dev's malloc.h.
        .systemLibrary(name: "CMalloc", providers: [.apt(["libc6-dev"])]),

        // MARK: - Ferry
        /// The build's commit, as a C string: the one value a build can hand the code.
        .target(name: "CFerryBuild", cSettings: [.define("FERRY_COMMIT", to: "\"\(commit)\"")]),
        .target(name: "FerryLoop", dependencies: ["CLibUV"]),
        .target(name: "FerryJSON"),
        .target(name: "FerryCommandLine"),
        .target(name: "FerryHTTP", dependencies: ["FerryLoop", "FerryJSON", "CHTTPParser", "CWslay", "CCrypto"]),
        .target(name: "FerryPostgres", dependencies: ["FerryLoop", "CLibPQ"]),
        .target(name: "FerryAuth", dependencies: ["FerryLoop", "FerryJSON", "CSodium", "CCrypto"]),
        .target(
            name: "FerryGateway",
            dependencies: [
                "FerryLoop", "FerryJSON", "FerryCommandLine", "FerryHTTP", "FerryPostgres", "FerryAuth", "CFerryBuild",
                "CCurl",
                "CMalloc",
            ]
        ),
        .executableTarget(
            name: "ferry", dependencies: ["FerryGateway", "FerryCommandLine", "FerryLoop", "FerryPostgres"]),
        /// The load generator's clients (WebSocket, SSE, sign-ups) and measurements; bench/ drives it.
        .target(name: "FerryLoad", dependencies: ["FerryLoop", "FerryJSON", "FerryHTTP"]),
        .executableTarget(
            name: "ferry-load", dependencies: ["FerryLoad", "FerryLoop", "FerryPostgres", "FerryCommandLine"]),

        // MARK: - The client SDK
        /// FerryClient depends on Foundation and CSQLite only, never on another Ferry
        /// module: an app links it alone.
        .target(name: "FerryClient", dependencies: ["CSQLite"], path: "Sources/FerryClient"),
        /// The example apps' tables from a terminal; two state folders are two devices.
        .executableTarget(name: "ferry-demo", dependencies: ["FerryClient"]),
        /// FerryClient's local costs beside bare SQLite; bench/client.sh drives it.
        .executableTarget(name: "ferry-client-bench", dependencies: ["FerryClient", "CSQLite"]),

        // MARK: - Tests
        /// Shared by the test targets: the PostgreSQL each test gets (migrated when asked),
        /// the in-process test gateway and its one secret, small socket clients, the built
        /// binaries run as child processes.
        .target(
            name: "FerryTestSupport",
            dependencies: ["FerryLoop", "FerryHTTP", "FerryPostgres", "FerryCommandLine", "FerryGateway", "CCrypto"],
            path: "Tests/FerryTestSupport"),
        // Need no PostgreSQL:
        .testTarget(name: "FerryLoopTests", dependencies: ["FerryLoop", "FerryTestSupport"]),
        .testTarget(name: "FerryJSONTests", dependencies: ["FerryJSON", "FerryTestSupport"]),
        .testTarget(name: "FerryCommandLineTests", dependencies: ["FerryCommandLine", "FerryTestSupport"]),
        .testTarget(name: "FerryHTTPTests", dependencies: ["FerryHTTP", "FerryTestSupport"]),
        .testTarget(name: "FerryAuthTests", dependencies: ["FerryAuth", "FerryLoop", "FerryTestSupport"]),
        .testTarget(name: "FerryLoadTests", dependencies: ["FerryLoad", "FerryTestSupport"]),
        /// The gateway's parts that need no database: the stream lifecycle, the cue path's
        /// values, the sealed pull cursor, token checks, request bodies, the access log.
        .testTarget(name: "FerryGatewayUnitTests", dependencies: ["FerryGateway", "FerryAuth", "FerryTestSupport"]),
        // Need PostgreSQL (some of their suites do not):
        .testTarget(name: "FerryPostgresTests", dependencies: ["FerryPostgres", "FerryTestSupport"]),
        .testTarget(
            name: "FerryGatewayTests",
            dependencies: ["FerryGateway", "FerryAuth", "FerryCommandLine", "FerryTestSupport"]),
        /// FerryClient: unit tests, the stream against an in-process gateway, and the rest
        /// against a real `ferry serve` with `ferry-demo` as processes.
        .testTarget(
            name: "FerryClientTests",
            dependencies: [
                "FerryClient", "FerryGateway", "FerryAuth", "FerryCommandLine", "FerryTestSupport", "FerryPostgres",
                "ferry", "ferry-demo",
            ]),
        /// The `ferry` binary's commands, run as processes.
        .testTarget(name: "FerryCLITests", dependencies: ["ferry", "FerryGateway", "FerryTestSupport"]),
    ]
)
