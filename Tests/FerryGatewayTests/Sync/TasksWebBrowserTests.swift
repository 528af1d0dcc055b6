import FerryTestSupport
import Foundation
import Testing

/// The tasks web example (`clients/js/examples/tasks-web`) in two real browsers: Debian's
/// headless Chromium driven through Selenium by `Tests/clients/tasks_web_browser.py`, two
/// profiles as two devices of one user against `ferry serve` on a database migrated with
/// the tasks example. Add, edit, complete, delete; a task added on one appears on the
/// other without a reload; with the gateway and the web server stopped, both edit and
/// reload and find the page and their data; back online, both converge; sign-in on a
/// profile holding its own tasks asks which to keep and does what was chosen (both
/// choices). A screenshot of each step goes to `.build/test-artifacts/tasks-web/`.
/// Chromium, its driver or Selenium missing fails the test (`make deps` installs them).
@Suite(.hangLimit, .tags(.database, .process), .tagSelection, .serialized) struct TasksWebBrowserTests {
    static let artifacts = TestRepository.root + "/.build/test-artifacts/tasks-web"

    @Test func twoBrowserProfilesAddEditSyncOfflineAndChooseOnSignIn() async throws {
        for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
            try #require(
                FileManager.default.isExecutableFile(atPath: tool),
                "\(tool) is missing: make deps installs chromium, chromium-driver and python3-selenium")
        }
        let ferry = try TestRepository.ferryExecutable().path
        let compiled = try await offload { try JSClientTests.compile() }
        try #require(compiled.status == 0, "tsc failed:\n\(compiled.output)")
        try await AccountsDatabase.with(examples: ["tasks"]) { database in
            let run = try await offload {
                try PythonScript.run(
                    arguments: [
                        PythonScript.path("tasks_web_browser.py"), "--ferry", ferry, "--database-url",
                        database.gatewayURL, "--secret", testSecret, "--artifacts", Self.artifacts, "--deadline", "420",
                    ], timeout: 540)
            }
            #expect(run.status == 0, "the browser test failed:\n\(run.output)")
            #expect(run.output.contains("tasks-web: every step passed"), "\(run.output)")
        }
        let screenshots = try FileManager.default.contentsOfDirectory(atPath: Self.artifacts)
            .filter { $0.hasSuffix(".png") && !$0.hasPrefix("failure") }
        #expect(screenshots.count == 15, "screenshots: \(screenshots.sorted())")
        for name in screenshots {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: Self.artifacts + "/" + name))
            #expect(bytes.starts(with: [0x89, 0x50, 0x4E, 0x47]) && bytes.count > 10_000, "\(name): not a real PNG")
        }
    }
}
