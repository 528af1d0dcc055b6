/// The proxies whose word about a client is believed: `FERRY_TRUSTED_PROXIES`.
///
/// A connection from one of them may start with a PROXY protocol header
/// (``ProxyHeaderDecoder``), which names the client; a request whose client so far is
/// one of them (no header, or a header naming another of them) is from whom its
/// `X-Forwarded-For` names (``client(of:headers:)``). From any other peer neither is
/// believed: a PROXY header is bad HTTP (`400`) and `X-Forwarded-For` is ignored, so no
/// client can choose the address its limits count. Trust only proxies that write one or
/// the other themselves: a proxy relaying a client's bytes as they are (haproxy in TCP
/// mode without `send-proxy`) would let the client write either.
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

    /// Who sent a request that arrived from `connection` (the TCP peer, or the client a
    /// trusted proxy's PROXY header named) with `headers`.
    ///
    /// While the address is a trusted proxy's, `X-Forwarded-For` says who that proxy
    /// serves: its entries (every field, in order, as one list) are read from the right,
    /// the end each proxy appends its own peer to, and the first that is not a trusted
    /// proxy's is the client. An entry that is no address stops the walk at the last
    /// trusted address: what lies left of it is the client's own writing. Anyone else's
    /// `X-Forwarded-For` is not read.
    public func client(of connection: ClientAddress?, headers: HTTPHeaders) -> ClientAddress? {
        guard !ranges.isEmpty, var client = connection, contains(client.ip) else { return connection }
        let fields = headers.values(for: "X-Forwarded-For")
        for field in fields.reversed() {
            for entry in field.split(separator: ",", omittingEmptySubsequences: false).reversed() {
                guard let address = ClientAddress(forwarded: entry.trimmingASCIISpaces) else { return client }
                client = address
                if !contains(address.ip) { return client }
            }
        }
        return client
    }

    public var description: String { ranges.map(\.description).joined(separator: ",") }
}
