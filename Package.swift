// swift-tools-version:6.0
import PackageDescription

/// The commit `ferry version` names: FERRY_COMMIT from the environment, which the
/// Makefile sets from git (SwiftPM evaluates the manifest again when it changes; its
/// own git information would be cached and go stale). Without it, "": unknown.
let commit = String((Context.environment["FERRY_COMMIT"] ?? "").filter { $0.isLetter || $0.isNumber || $0 == "-" })

/// Ferry: a self-hosted sync gateway for offline-first apps.
///
/// Modules depend one way, bottom to top (see docs/ARCHITECTURE.md):
/// C shims → FerryLoop → FerryHTTP / FerryPostgres → FerryGateway → ferry.
/// CFerryBuild (the build's commit) is the one C target with code of its own.
let package = Package(
    name: "Ferry",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "ferry", targets: ["ferry"]),
        .executable(name: "ferry-load", targets: ["ferry-load"]),
        .library(name: "FerryGateway", targets: ["FerryGateway"]),
    ],
    targets: [
        // MARK: - C libraries from Debian
        .systemLibrary(name: "CLibUV", pkgConfig: "libuv", providers: [.apt(["libuv1-dev"])]),
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CHTTPParser", providers: [.apt(["libhttp-parser-dev"])]),
        .systemLibrary(name: "CWslay", providers: [.apt(["libwslay-dev"])]),
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),

        // MARK: - Ferry
        /// The build's commit, as a C string: the one value a build can hand the code.
        .target(name: "CFerryBuild", cSettings: [.define("FERRY_COMMIT", to: "\"\(commit)\"")]),
        .target(name: "FerryLoop", dependencies: ["CLibUV"]),
        .target(name: "FerryHTTP", dependencies: ["FerryLoop", "CHTTPParser", "CWslay", "CCrypto"]),
        .target(name: "FerryPostgres", dependencies: ["FerryLoop", "CLibPQ"]),
        .target(
            name: "FerryGateway",
            dependencies: ["FerryLoop", "FerryHTTP", "FerryPostgres", "CSodium", "CCrypto", "CFerryBuild"],
            resources: []
        ),
        .executableTarget(name: "ferry", dependencies: ["FerryGateway"]),
        /// The load generator's clients (WebSocket, SSE, sign-ups) and measurements; bench/ drives it.
        .target(name: "FerryLoad", dependencies: ["FerryLoop", "CCrypto"]),
        .executableTarget(name: "ferry-load", dependencies: ["FerryLoad", "FerryLoop", "FerryPostgres"]),

        // MARK: - Tests
        /// Shared by the test targets: the PostgreSQL each test gets, and small socket clients.
        .target(name: "FerryTestSupport", dependencies: ["FerryLoop", "FerryPostgres"], path: "Tests/FerryTestSupport"),
        .testTarget(name: "FerryLoopTests", dependencies: ["FerryLoop"]),
        .testTarget(name: "FerryHTTPTests", dependencies: ["FerryHTTP", "FerryTestSupport"]),
        .testTarget(name: "FerryPostgresTests", dependencies: ["FerryPostgres", "FerryTestSupport"]),
        .testTarget(name: "FerryGatewayTests", dependencies: ["FerryGateway", "FerryTestSupport", "FerryLoad"]),
        .testTarget(name: "FerryLoadTests", dependencies: ["FerryLoad"]),
    ]
)
