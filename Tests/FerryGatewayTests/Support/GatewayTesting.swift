import FerryCommandLine
import FerryGateway
import FerryTestSupport
import Foundation

/// A 32-byte secret for tests; never used outside them.
let testSecret = "test-secret-test-secret-test-secret!"

/// Starts an in-process gateway on a free loopback port with `arguments` added to the
/// test defaults (a later flag wins), runs `body`, shuts it down.
func withGateway<T>(
    databaseURL: String, arguments: [String] = [], _ body: (_ port: Int) async throws -> T
) async throws -> T {
    try await withStartedGateway(databaseURL: databaseURL, arguments: arguments) { _, port in try await body(port) }
}

/// ``withGateway(databaseURL:arguments:_:)`` that also hands `body` the gateway itself;
/// it logs to `logger` (standard error, as text, unless given).
func withStartedGateway<T>(
    databaseURL: String, arguments: [String] = [], logger: Logger? = nil,
    _ body: (_ gateway: Gateway, _ port: Int) async throws -> T
) async throws -> T {
    let values = try SettingValues(
        GatewayConfiguration.settings,
        arguments: [
            "--database-url", databaseURL, "--jwt-secret", testSecret, "--listen", "127.0.0.1:0", "--threads", "2",
            "--shutdown-timeout", "2",
        ] + arguments, environment: [:])
    let gateway = try Gateway(
        configuration: try GatewayConfiguration(values), logger: logger ?? Logger(format: .text, fileDescriptor: 2))
    let address = try gateway.start()
    do {
        let result = try await body(gateway, address.port)
        await gateway.shutdown()
        return result
    } catch {
        await gateway.shutdown()
        throw error
    }
}
