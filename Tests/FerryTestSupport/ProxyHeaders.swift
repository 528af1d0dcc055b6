import FerryHTTP

/// PROXY protocol headers as a proxy writes them, for tests that are the proxy.
public enum ProxyHeaders {
    /// A v1 line: `PROXY TCP4 …` or `PROXY TCP6 …` by the addresses' family.
    public static func v1(source: String, sourcePort: Int, destination: String, destinationPort: Int) -> [UInt8] {
        let family = source.contains(":") ? "TCP6" : "TCP4"
        return Array("PROXY \(family) \(source) \(destination) \(sourcePort) \(destinationPort)\r\n".utf8)
    }

    /// The v2 signature, 12 bytes.
    public static let v2Signature: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A]

    /// A v2 header: `command` 0x21 is PROXY, 0x20 LOCAL; `family` 0x11 TCP over IPv4,
    /// 0x21 over IPv6, 0x00 unspecified; `payload` the addresses and TLVs as they are.
    public static func v2(command: UInt8 = 0x21, family: UInt8, payload: [UInt8]) -> [UInt8] {
        v2Signature + [command, family, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)] + payload
    }

    /// A v2 PROXY header for a TCP client at `source` (IPv4 or IPv6, the destination of
    /// the same family), with `tlvs` after the addresses.
    public static func v2(
        source: String, sourcePort: Int, destination: String, destinationPort: Int, tlvs: [UInt8] = []
    ) -> [UInt8] {
        let from = IPAddress(source)!
        let to = IPAddress(destination)!
        let ports = [
            UInt8(sourcePort >> 8), UInt8(sourcePort & 0xFF), UInt8(destinationPort >> 8),
            UInt8(destinationPort & 0xFF),
        ]
        return v2(family: from.isIPv4 ? 0x11 : 0x21, payload: from.bytes + to.bytes + ports + tlvs)
    }
}
