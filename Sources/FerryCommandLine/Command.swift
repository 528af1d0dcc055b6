import FerryGateway
import FerryPostgres
import Foundation

/// A `ferry` subcommand.
protocol Command {
    /// The word after `ferry`.
    static var name: String { get }
    /// One line for `ferry --help`.
    static var summary: String { get }
    /// What `ferry <name> --help` prints above the settings.
    static var usage: String { get }
    /// The flags and variables it reads.
    static var settings: [Setting] { get }
    /// Runs with resolved settings; returns the exit status.
    static func run(_ values: SettingValues) throws -> Int32
}

/// Exit statuses shared by every command.
enum ExitStatus {
    static let success: Int32 = 0
    static let failure: Int32 = 1
    /// A missing or invalid setting, or a bad command line.
    static let usage: Int32 = 2
}

/// Writes one line to standard error.
func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// Writes one line to standard output, unbuffered (progress lines show up at once
/// even when piped).
func printLine(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

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
