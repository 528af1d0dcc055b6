/// The status line and headers of an HTTP/1.1 response, as a client reads them.
public struct HTTPResponseHead: Equatable, Sendable {
    /// The status code (`101`, `200`, …).
    public var status: Int
    /// Header values by lowercased name; a repeated header keeps its last value.
    public var headers: [String: String]
    /// Bytes the head took, the blank line included: the body starts there.
    public var length: Int

    /// What ``parse(_:)`` found.
    public enum ParseResult: Equatable, Sendable {
        /// The blank line that ends the head has not arrived yet.
        case incomplete
        /// Not an HTTP/1.x response head.
        case invalid
        /// A complete head.
        case complete(HTTPResponseHead)
    }

    /// Creates a head (tests, and callers that build one by hand).
    public init(status: Int, headers: [String: String], length: Int) {
        self.status = status
        self.headers = headers
        self.length = length
    }

    /// Largest head accepted; a server sending more is not one this client talks to.
    public static let maximumLength = 16 * 1024

    /// Parses the head at the start of `bytes`.
    public static func parse(_ bytes: ArraySlice<UInt8>) -> ParseResult {
        guard let end = headEnd(bytes) else {
            return bytes.count > maximumLength ? .invalid : .incomplete
        }
        let text = String(decoding: bytes[bytes.startIndex..<end], as: UTF8.self)
        var lines = text.split(separator: "\r\n", omittingEmptySubsequences: false)[...]
        guard let statusLine = lines.popFirst(), statusLine.hasPrefix("HTTP/1.") else { return .invalid }
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, let status = Int(parts[1]), (100...599).contains(status) else { return .invalid }
        var headers: [String: String] = [:]
        for line in lines where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { return .invalid }
            let name = line[..<colon].lowercased()
            let value = line[line.index(after: colon)...].trimmingASCIISpaces
            headers[name] = value
        }
        return .complete(HTTPResponseHead(status: status, headers: headers, length: end + 4 - bytes.startIndex))
    }

    /// The index of the `\r\n\r\n` that ends the head, if it has arrived.
    private static func headEnd(_ bytes: ArraySlice<UInt8>) -> Int? {
        guard bytes.count >= 4 else { return nil }
        var index = bytes.startIndex
        while index + 3 < bytes.endIndex {
            if bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
                return index
            }
            index += 1
        }
        return nil
    }
}
