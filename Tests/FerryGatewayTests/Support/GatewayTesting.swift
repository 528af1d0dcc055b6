import FerryGateway
import FerryTestSupport
import Foundation

/// Starts an in-process ``TestGateway`` on a free loopback port with `arguments` added to
/// the test defaults (a later flag wins), runs `body`, shuts it down.
func withGateway<T>(
    databaseURL: String, arguments: [String] = [], _ body: (_ port: Int) async throws -> T
) async throws -> T {
    try await TestGateway.with(databaseURL: databaseURL, arguments: arguments) { _, port in try await body(port) }
}

/// ``withGateway(databaseURL:arguments:_:)`` that also hands `body` the gateway itself;
/// it logs to `logger` (standard error, as text, unless given).
func withStartedGateway<T>(
    databaseURL: String, arguments: [String] = [], logger: Logger? = nil,
    _ body: (_ gateway: Gateway, _ port: Int) async throws -> T
) async throws -> T {
    try await TestGateway.with(databaseURL: databaseURL, arguments: arguments, logger: logger, body)
}
