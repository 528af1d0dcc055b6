import Foundation

/// A command of a ``CommandLineTool``: `ferry serve`, `ferry-load idle`.
public protocol Command {
    /// The word after the program's name.
    static var name: String { get }
    /// One line for the program's help.
    static var summary: String { get }
    /// What `<program> <name> --help` prints above the settings.
    static var usage: String { get }
    /// The flags and variables it reads.
    static var settings: [Setting] { get }
    /// Runs with resolved settings; returns the exit status.
    static func run(_ values: SettingValues) throws -> Int32
}

/// Exit statuses shared by every command.
public enum ExitStatus {
    /// Done.
    public static let success: Int32 = 0
    /// A failure, printed.
    public static let failure: Int32 = 1
    /// A missing or invalid setting, or a bad command line.
    public static let usage: Int32 = 2
}

/// Writes one line to standard error.
public func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// Writes one line to standard output, unbuffered (progress lines show up at once
/// even when piped).
public func printLine(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
