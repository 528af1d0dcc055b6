/// The proxies whose word about a client is believed: `FERRY_TRUSTED_PROXIES`.
///
/// A connection from one of them must start with a PROXY protocol header
/// (``ProxyHeaderDecoder``), which names the client. From any other peer a PROXY header
/// is bad HTTP (`400`), so no client can choose the address its limits count.
public struct TrustedProxies: Sendable, Hashable, CustomStringConvertible {
    /// The blocks, in the order given.
    public let ranges: [AddressRange]

    /// No proxy is trusted: every client is its TCP peer.
    public static let none = TrustedProxies(ranges: [])

    /// Trusts the addresses of `ranges`.
    public init(ranges: [AddressRange]) { self.ranges = ranges }

    /// Parses a comma-separated list of CIDR blocks or addresses (`10.0.0.0/8, ::1`);
    /// spaces around entries are ignored, an empty text trusts nobody, an empty entry is
    /// refused.
    public init(parsing text: String) throws(AddressRange.ParseError) {
        guard !text.trimmingASCIISpaces.isEmpty else {
            self.init(ranges: [])
            return
        }
        var ranges: [AddressRange] = []
        for entry in text.split(separator: ",", omittingEmptySubsequences: false) {
            let entry = entry.trimmingASCIISpaces
            guard !entry.isEmpty else {
                throw AddressRange.ParseError(description: "\(text) has an empty entry")
            }
            ranges.append(try AddressRange(entry))
        }
        self.init(ranges: ranges)
    }

    /// Whether no proxy is trusted.
    public var isEmpty: Bool { ranges.isEmpty }

    /// Whether `address` is a trusted proxy's.
    public func contains(_ address: IPAddress) -> Bool {
        ranges.contains { $0.contains(address) }
    }

    public var description: String { ranges.map(\.description).joined(separator: ",") }
}
