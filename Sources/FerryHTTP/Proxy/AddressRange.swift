/// A block of addresses in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`, or one address).
public struct AddressRange: Sendable, Hashable, CustomStringConvertible {
    /// The first address of the block.
    public let base: IPAddress
    /// How many leading bits an address shares with ``base`` to be in the block
    /// (0…32 for IPv4, 0…128 for IPv6).
    public let prefixLength: Int

    /// Why a range's text was refused.
    public struct ParseError: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// Parses `address/prefix` or an address alone (the block of that one address). A
    /// block whose address has bits set past its prefix (`10.0.0.1/8`) is refused rather
    /// than guessed at: it may be a typo for a narrower block.
    public init(_ text: some StringProtocol) throws(ParseError) {
        let text = String(text)
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddress(parts[0]) else {
            throw ParseError(description: "\(text) is not an IPv4 or IPv6 address or CIDR block")
        }
        let width = address.isIPv4 ? 32 : 128
        var length = width
        if parts.count == 2 {
            guard let value = ClientAddress.port(parts[1]), value <= width else {
                throw ParseError(description: "\(text) has a prefix length that is not 0…\(width)")
            }
            length = value
        }
        let masked = Self.masked(address, prefixLength: length)
        guard masked == address else {
            throw ParseError(
                description: "\(text) has bits set past its /\(length) prefix (the block is \(masked)/\(length))")
        }
        base = address
        prefixLength = length
    }

    /// Whether `address` is in the block. An IPv4 block holds IPv4 addresses only
    /// (and their IPv4-mapped IPv6 forms, which are the same ``IPAddress``).
    public func contains(_ address: IPAddress) -> Bool {
        guard address.isIPv4 == base.isIPv4 else { return false }
        return Self.masked(address, prefixLength: prefixLength) == base
    }

    public var description: String { "\(base)/\(prefixLength)" }

    /// `address` with every bit past the prefix cleared.
    private static func masked(_ address: IPAddress, prefixLength: Int) -> IPAddress {
        // IPv4 sits in the low 32 bits of the mapped form.
        let bits = address.isIPv4 ? prefixLength + 96 : prefixLength
        let highMask: UInt64 = bits >= 64 ? .max : (bits == 0 ? 0 : .max << (64 - bits))
        let lowMask: UInt64 = bits <= 64 ? 0 : (bits >= 128 ? .max : .max << (128 - bits))
        return IPAddress(high: address.high & highMask, low: address.low & lowMask)
    }
}
