import FerryCommandLine
import FerryGateway
import Foundation

/// The HS256 secret of every gateway the tests start, in process or as `ferry serve`;
/// never used outside them.
public let testSecret = "test-secret-test-secret-test-secret!"

/// An in-process gateway on loopback with the test defaults (``testSecret``, two loops, a
/// two-second shutdown) and `arguments` added (a later flag wins). On port 0 it takes a
/// free one each start; on a given port a restarted gateway is at the same address.
public actor TestGateway {
    /// The database URL it logs in with.
    public nonisolated let databaseURL: String
    private let arguments: [String]
    private let requestedPort: Int
    private let logger: Logger
    private var running: (gateway: Gateway, port: Int)?

    /// A gateway not yet started; ``start()`` starts it.
    public init(databaseURL: String, arguments: [String] = [], port: Int = 0, logger: Logger? = nil) {
        self.databaseURL = databaseURL
        self.arguments = arguments
        self.requestedPort = port
        self.logger = logger ?? Logger(format: .text, fileDescriptor: 2)
    }

    /// The configuration the test defaults and `arguments` make; the one place the tests
    /// build a `GatewayConfiguration` from flags.
    public static func configuration(
        databaseURL: String, arguments: [String] = [], port: Int = 0
    ) throws -> GatewayConfiguration {
        let values = try SettingValues(
            GatewayConfiguration.settings,
            arguments: [
                "--database-url", databaseURL, "--jwt-secret", testSecret, "--listen", "127.0.0.1:\(port)",
                "--threads", "2", "--shutdown-timeout", "2",
            ] + arguments, environment: [:])
        return try GatewayConfiguration(values)
    }

    /// Starts the gateway (after ``stop()``, again); returns the port it listens on.
    @discardableResult
    public func start() throws -> Int {
        precondition(running == nil, "TestGateway.start while it runs")
        let gateway = try Gateway(
            configuration: try Self.configuration(databaseURL: databaseURL, arguments: arguments, port: requestedPort),
            logger: logger)
        let port = try gateway.start().port
        running = (gateway, port)
        return port
    }

    /// Shuts the gateway down (its streams close `1001`); nothing when it is not running.
    public func stop() async {
        await running?.gateway.shutdown()
        running = nil
    }

    /// The running gateway and its port; throws when it is not running.
    public func started() throws -> (gateway: Gateway, port: Int) {
        guard let running else { throw TestGatewayError(description: "the test gateway is not running") }
        return running
    }

    /// Starts a gateway, runs `body` with it and its port, shuts it down whether `body`
    /// throws or not.
    public static func with<T>(
        databaseURL: String, arguments: [String] = [], port: Int = 0, logger: Logger? = nil,
        _ body: (_ gateway: Gateway, _ port: Int) async throws -> T
    ) async throws -> T {
        let test = TestGateway(databaseURL: databaseURL, arguments: arguments, port: port, logger: logger)
        try await test.start()
        do {
            let (gateway, port) = try await test.started()
            let value = try await body(gateway, port)
            await test.stop()
            return value
        } catch {
            await test.stop()
            throw error
        }
    }
}

/// A test gateway used wrongly, said plainly.
public struct TestGatewayError: Error, CustomStringConvertible {
    public let description: String
}
