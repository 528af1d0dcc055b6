import Foundation

/// `--name value` pairs from the command line, read by name with defaults.
struct Options {
    private var values: [String: String] = [:]
    private var flags: Set<String> = []

    /// Parses `arguments` (after the subcommand). A name followed by another `--name`
    /// or by nothing is a flag.
    init(_ arguments: [String]) throws(UsageError) {
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            guard argument.hasPrefix("--") else { throw UsageError("unexpected argument \(argument)") }
            let name = String(argument.dropFirst(2))
            if let equals = name.firstIndex(of: "=") {
                values[String(name[..<equals])] = String(name[name.index(after: equals)...])
            } else if index + 1 < arguments.count && !arguments[index + 1].hasPrefix("--") {
                values[name] = arguments[index + 1]
                index += 1
            } else {
                flags.insert(name)
            }
            index += 1
        }
    }

    func string(_ name: String) throws(UsageError) -> String {
        guard let value = values[name] else { throw UsageError("--\(name) is required") }
        return value
    }

    func string(_ name: String, default fallback: String) -> String { values[name] ?? fallback }

    func optionalString(_ name: String) -> String? { values[name] }

    func integer(_ name: String, default fallback: Int? = nil) throws(UsageError) -> Int {
        guard let text = values[name] else {
            guard let fallback else { throw UsageError("--\(name) is required") }
            return fallback
        }
        guard let value = Int(text), value >= 0 else { throw UsageError("--\(name) must be a whole number ≥ 0") }
        return value
    }

    func double(_ name: String, default fallback: Double) throws(UsageError) -> Double {
        guard let text = values[name] else { return fallback }
        guard let value = Double(text), value > 0 else { throw UsageError("--\(name) must be a number > 0") }
        return value
    }

    func flag(_ name: String) -> Bool { flags.contains(name) }
}

/// A bad command line, said in one line.
struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Any failure a command reports in one line before exiting.
struct LoadError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Writes one line to standard output at once (the bench script and the coordinator read it as it comes).
func printLine(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// Writes one line to standard error.
func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// `http://host:port` → the server's socket address (numeric hosts only: loopback or a bench namespace).
func serverAddress(_ url: String) throws -> SocketAddressText {
    guard let components = URLComponents(string: url), components.scheme == "http", let host = components.host,
        let port = components.port
    else { throw UsageError("--url must be http://<numeric host>:<port>, got \(url)") }
    return SocketAddressText(host: host, port: port)
}

/// A host and port, turned into a `SocketAddress` where it is used.
struct SocketAddressText: Sendable {
    var host: String
    var port: Int
}

/// The users of a token file: one `user id<TAB>access token` per line.
func readTokens(_ path: String) throws -> [(userID: String, token: String)] {
    let text = try String(contentsOfFile: path, encoding: .utf8)
    return try text.split(separator: "\n").map { line in
        let fields = line.split(separator: "\t")
        guard fields.count == 2 else { throw LoadError("\(path): a line is not `user id<TAB>token`") }
        return (String(fields[0]), String(fields[1]))
    }
}

/// Formats milliseconds with three decimals.
func milliseconds(_ value: Double) -> String { String(format: "%.3f", value) }
