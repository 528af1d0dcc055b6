import Foundation
import Testing

// What a suite needs beyond its own process, as Swift Testing tags, and the selection
// that lets either set run alone (README, "Tests"). This toolchain's `swift test
// --filter tag:…` does not select by tag yet, so two variables do, through
// ``TagSelection``, which every suite carries:
//
//     FERRY_TEST_ONLY_TAGS=database swift test               what needs PostgreSQL
//     FERRY_TEST_SKIP_TAGS=database,process swift test       what needs neither
//
// A test left out is reported cancelled, naming the variable.

extension Tag {
    /// Needs a PostgreSQL server: `FERRY_TEST_DATABASE_URL`, or the development cluster
    /// (``TestDatabase``).
    @Tag public static var database: Self
    /// Runs a child process: the built `ferry`, or an independent client (Python).
    @Tag public static var process: Self
}

extension Trait where Self == TimeLimitTrait {
    /// Ten minutes per test, for the suites that wait on real sockets, PostgreSQL or
    /// child processes: a test that hangs fails by name instead of stalling the run.
    /// The limit counts from the test's start, and a test of a parallel run shares two
    /// cores with up to 15 others (`make test`'s `TEST_WIDTH`): a test that takes a
    /// minute alone may take several, so the limit is ten, not a measure of any test's
    /// speed.
    public static var hangLimit: Self { .timeLimit(.minutes(10)) }
}

/// Leaves out the tests whose tags `FERRY_TEST_SKIP_TAGS` names, and, when
/// `FERRY_TEST_ONLY_TAGS` is set, those with none of the tags it names (comma-separated
/// names, such as `database,process`). Unset, every test runs.
public struct TagSelection: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func scopeProvider(for test: Test, testCase: Test.Case?) -> TagSelection? {
        test.isSuite ? nil : self
    }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        // A static member's description is its name after a period: `.database`.
        let names = Set(test.tags.map { String($0.description.drop { $0 == "." }) })
        if let skipped = Self.names("FERRY_TEST_SKIP_TAGS"), !names.isDisjoint(with: skipped) {
            try Test.cancel("left out: FERRY_TEST_SKIP_TAGS names one of its tags")
        }
        if let only = Self.names("FERRY_TEST_ONLY_TAGS"), names.isDisjoint(with: only) {
            try Test.cancel("left out: FERRY_TEST_ONLY_TAGS names none of its tags")
        }
        try await function()
    }

    private static func names(_ variable: String) -> Set<String>? {
        guard let value = ProcessInfo.processInfo.environment[variable], !value.isEmpty else { return nil }
        return Set(value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
    }
}

extension Trait where Self == TagSelection {
    /// Each suite's: the tests `FERRY_TEST_ONLY_TAGS` and `FERRY_TEST_SKIP_TAGS` leave out are cancelled.
    public static var tagSelection: Self { TagSelection() }
}
