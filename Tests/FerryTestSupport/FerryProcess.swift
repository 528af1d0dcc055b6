import Foundation

/// The repository these tests run from: its `sql/` and the binaries SwiftPM built.
public enum TestRepository {
    /// The repository's root directory.
    public static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// The repository's `sql/` directory, for Ferry's own migrations and the examples'.
    public static let sqlRoot = root + "/sql"

    /// The `ferry` binary SwiftPM built next to the tests.
    public static func ferryExecutable() throws -> URL { try executable("ferry") }

    /// The binary `name` (`ferry`, `ferry-demo`) SwiftPM built next to the tests.
    public static func executable(_ name: String) throws -> URL {
        for configuration in ["debug", "release"] {
            let url = URL(fileURLWithPath: root).appendingPathComponent(".build/\(configuration)/\(name)")
            if FileManager.default.isExecutableFile(atPath: url.path) { return url }
        }
        throw MissingBinary(name: name)
    }
}

/// The tests need the `ferry` executable (and `ferry-demo`); `swift build` (and `make test`) builds them.
public struct MissingBinary: Error, CustomStringConvertible {
    /// The binary's name.
    public var name = "ferry"
    public var description: String { "no \(name) binary under .build/: run `swift build` before the tests" }
}

/// What the `ferry` binary printed and how it ended.
public struct FerryRun: Sendable {
    /// The exit status (-1 when a signal ended it).
    public var status: Int32
    /// Standard output.
    public var output: String
    /// Standard error.
    public var errors: String
    /// Standard output's lines.
    public var lines: [String] { output.split(separator: "\n").map(String.init) }

    /// A run that ended with `status` and printed `output` and `errors`.
    public init(status: Int32, output: String, errors: String) {
        self.status = status
        self.output = output
        self.errors = errors
    }
}

/// Runs the built `ferry` with `FERRY_DATABASE_URL` (none when nil) and `environment`;
/// output goes to files (a pipe nobody drains could stall it), read once it exited.
public func runFerry(_ arguments: [String], databaseURL: String?, environment: [String: String] = [:]) async throws
    -> FerryRun
{
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-run-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let outputFile = directory.appendingPathComponent("stdout")
    let errorFile = directory.appendingPathComponent("stderr")
    let child = try ChildProcess(
        try TestRepository.ferryExecutable().path, arguments,
        environment: ["PATH": "/usr/bin:/bin"].merging(databaseURL.map { ["FERRY_DATABASE_URL": $0] } ?? [:]) { a, _ in
            a
        }
        .merging(environment) { _, given in given }, output: outputFile.path,
        errors: errorFile.path)
    let ending = try await offload { child.wait() }
    return FerryRun(
        status: ending.exitStatus ?? -1,
        output: try String(contentsOf: outputFile, encoding: .utf8),
        errors: try String(contentsOf: errorFile, encoding: .utf8))
}

/// Runs blocking work (sockets, child processes) on a thread of its own, off Swift's
/// cooperative threads, which parallel tests share: a test blocked in `recv` must not
/// stall the others. Not on Dispatch's global queue either: URLSession's callbacks run
/// there, and the whole suite's blocked reads starved a FerryClient test's requests.
public func offload<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try work() }) }.start()
    }
}

/// A temporary directory named `label` (`app` unless given) holding `files` (path →
/// SQL, e.g. `functions/f.sql`), for migrations a test writes; removed by ``remove()``.
public struct MigrationFiles: Sendable {
    /// The directory, named `label`.
    public let directory: URL

    /// Writes `files` into a fresh directory named `label`.
    public init(_ files: [String: String], label: String = "app") throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("ferry-migrator-\(UUID().uuidString)")
            .appendingPathComponent(label)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for (name, sql) in files { try write(name, sql) }
    }

    /// Writes (or rewrites) the file `name`.
    public func write(_ name: String, _ sql: String) throws {
        let file = directory.appendingPathComponent(name)
        try FileManager.default.createDirectory(
            at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try sql.write(to: file, atomically: true, encoding: .utf8)
    }

    /// Deletes the file `name`.
    public func delete(_ name: String) throws {
        try FileManager.default.removeItem(at: directory.appendingPathComponent(name))
    }

    /// Removes the directory and what it holds.
    public func remove() { try? FileManager.default.removeItem(at: directory.deletingLastPathComponent()) }
}
