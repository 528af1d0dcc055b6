import FerryLoop
import Glibc

/// An IPv4 or IPv6 address, without a port.
///
/// An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`, what a dual-stack socket reports
/// for an IPv4 peer) is the IPv4 address it maps, so one client is one address however
/// it arrived. Stored as two words: no allocation per connection.
public struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    /// The first 64 bits of the IPv6 form (0 for IPv4).
    let high: UInt64
    /// The last 64 bits of the IPv6 form (`0xffff_xxxxxxxx` for IPv4).
    let low: UInt64
    /// Whether this is an IPv4 address (held as its IPv4-mapped IPv6 form).
    public let isIPv4: Bool

    /// The address of 4 (IPv4) or 16 (IPv6) bytes in network order; nil for another count.
    public init?<Bytes: Collection<UInt8>>(bytes: Bytes) {
        let bytes = Array(bytes)
        switch bytes.count {
        case 4:
            self.init(ipv4: bytes.reduce(0) { $0 << 8 | UInt32($1) })
        case 16:
            let high = bytes[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            let low = bytes[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            self.init(high: high, low: low)
        default:
            return nil
        }
    }

    /// The IPv4 address `value` (host byte order: `0x7f000001` is 127.0.0.1).
    init(ipv4 value: UInt32) {
        high = 0
        low = 0xffff_0000_0000 | UInt64(value)
        isIPv4 = true
    }

    /// The IPv6 address of these two words; an IPv4-mapped one is IPv4.
    init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
        isIPv4 = high == 0 && low >> 32 == 0xffff
    }

    /// Parses a numeric address (`192.0.2.1`, `2001:db8::1`) as `inet_pton` reads it:
    /// IPv4 in four decimal parts, IPv6 in RFC 4291's text forms. Nil for anything
    /// else (a host name, a port, brackets, a zone).
    public init?(_ text: some StringProtocol) {
        let text = String(text)
        guard !text.isEmpty, text.utf8.count <= 45 else { return nil }
        if text.utf8.contains(UInt8(ascii: ":")) {
            var address = in6_addr()
            guard inet_pton(AF_INET6, text, &address) == 1 else { return nil }
            self.init(bytes: withUnsafeBytes(of: &address) { Array($0) })
        } else {
            var address = in_addr()
            guard inet_pton(AF_INET, text, &address) == 1 else { return nil }
            self.init(bytes: withUnsafeBytes(of: &address) { Array($0) })
        }
    }

    /// The host of a socket address.
    public init(_ address: SocketAddress) {
        self.init(bytes: address.addressBytes)!
    }

    /// The address's bytes in network order: 4 for IPv4, 16 for IPv6.
    public var bytes: [UInt8] {
        if isIPv4 { return (0..<4).map { UInt8(truncatingIfNeeded: low >> (24 - 8 * $0)) } }
        return (0..<8).map { UInt8(truncatingIfNeeded: high >> (56 - 8 * $0)) }
            + (0..<8).map { UInt8(truncatingIfNeeded: low >> (56 - 8 * $0)) }
    }

    /// The canonical text (`192.0.2.1`, `2001:db8::1`: RFC 5952's, as `inet_ntop` writes it).
    public var description: String {
        var text = [CChar](repeating: 0, count: 64)
        var bytes = self.bytes
        _ = inet_ntop(isIPv4 ? AF_INET : AF_INET6, &bytes, &text, socklen_t(text.count))
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// What limits per client address count this address under: itself for IPv4, its
    /// /64 for IPv6 (`2001:db8:1:2::/64`), the block one subscriber is given and may
    /// pick addresses from at will, so that a new address in it is not a new client.
    public var limitKey: String {
        if isIPv4 { return description }
        return IPAddress(high: high, low: 0).description + "/64"
    }
}
