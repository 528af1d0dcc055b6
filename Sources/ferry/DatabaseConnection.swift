import FerryPostgres
import Foundation

/// A database a command could not reach, said in one line.
struct ConnectionFailure: Error, CustomStringConvertible {
    let description: String
}

/// Connects for a command; a failure names where it tried (never the password).
func connectToDatabase(_ url: String, applicationName: String) async throws -> PostgresClient {
    let configuration = try PostgresConfiguration(url, applicationName: applicationName)
    do {
        return try await PostgresClient.connect(configuration)
    } catch {
        let parameters = configuration.parameters
        let place = "\(parameters["host"] ?? "localhost"):\(parameters["port"] ?? "5432")/\(parameters["dbname"] ?? "")"
        let message = error.message.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
        throw ConnectionFailure(description: "cannot connect to \(place): \(message.joined(separator: " "))")
    }
}

/// Connects for a command (``connectToDatabase(_:applicationName:)``), runs `body`, and
/// closes the connection however `body` ends.
func withDatabase<Value>(
    _ url: String, applicationName: String, _ body: (PostgresClient) async throws -> Value
) async throws -> Value {
    let client = try await connectToDatabase(url, applicationName: applicationName)
    do {
        let value = try await body(client)
        await client.close()
        return value
    } catch {
        await client.close()
        throw error
    }
}
