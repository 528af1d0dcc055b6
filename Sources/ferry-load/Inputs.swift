import FerryCommandLine
import Foundation

/// Any failure a command reports in one line before exiting.
struct LoadError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// `http://host:port` → the server's socket address (numeric hosts only: loopback or a bench namespace).
func serverAddress(_ url: String) throws -> SocketAddressText {
    guard let components = URLComponents(string: url), components.scheme == "http", let host = components.host,
        let port = components.port
    else { throw SettingsError("invalid --url: \(url) (expected http://<numeric host>:<port>)") }
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
