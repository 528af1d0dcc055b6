/// Reads the PROXY protocol header (HAProxy's spec, versions 1 and 2) that may start a
/// connection from a trusted proxy. A plain value: bytes in, an event out, no sockets.
///
/// Whether a header comes is told by its signature (`PROXY ` for v1, v2's 12 bytes):
/// while the bytes so far are the start of one, it waits for more; as soon as a byte
/// departs from both, the connection has no header (``Event/noHeader``) and
/// every byte read, those held from earlier calls first, is the request's. No HTTP
/// request starts with either signature (no method is `PROXY`, and v2's holds a NUL), so
/// a request is never taken for a header, nor a header for a request.
///
/// Bounded: it holds at most one header's bytes, a v1 line of at most 107 bytes or a v2
/// header of 16 bytes and at most ``maxV2PayloadBytes`` of addresses and TLVs, which are
/// skipped. Bytes after the header are not its to take: ``Event/header(_:consumed:)``
/// says how many of the last call's bytes were the header's, and the rest are the first
/// of the request. Once a whole signature was read, a malformed or truncated line, an
/// unknown version, command or family, or a header over its bound is refused at once
/// (``Event/invalid(_:)``); the connection's head timeout bounds a header, or a
/// signature, that never ends.
struct ProxyHeaderDecoder {
    /// What a ``decode(_:)`` call found.
    enum Event: Equatable {
        /// Every byte given belongs to a header that is not complete yet.
        case needMoreBytes
        /// The header is complete; the first `consumed` bytes of the last call were its.
        case header(ProxyHeader, consumed: Int)
        /// The connection starts with no header: ``earlier`` (the bytes of earlier calls,
        /// held as the start of a signature: at most 11), then every byte of the last
        /// call, are the request's.
        case noHeader
        /// Not a PROXY protocol header, or not one this server takes: why.
        case invalid(String)
    }

    /// The longest v1 header, `\r\n` included (the spec's bound).
    static let maxV1Bytes = 107
    /// The most bytes a v2 header may carry after its 16: addresses (at most 216, for
    /// `AF_UNIX`) and TLVs, which a proxy may add (TLS facts, a cloud's endpoint id).
    static let maxV2PayloadBytes = 2048
    static let v1Signature = Array("PROXY ".utf8)
    static let v2Signature: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A]

    /// The header's bytes so far (from earlier calls).
    private var held: [UInt8] = []

    /// After ``Event/noHeader``: the bytes of earlier calls, which come before the last
    /// call's. Not a payload of the event: with a `[UInt8]` payload beside
    /// ``Event/invalid(_:)``'s `String`, this Swift 6.3 build matched `.invalid` wrongly
    /// (`if case .invalid` false for an `.invalid`), so the enum keeps no array.
    var earlier: [UInt8] { held }

    /// Reads the next bytes of the connection.
    mutating func decode(_ bytes: UnsafeRawBufferPointer) -> Event {
        let before = held.count
        // Never take more than the longest header could still need.
        let room = 16 + Self.maxV2PayloadBytes - before
        held.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[..<min(bytes.count, room)]))
        switch Self.parse(held) {
        case .incomplete:
            return .needMoreBytes
        case .absent:
            held.removeSubrange(before...)
            return .noHeader
        case .invalid(let reason):
            held = []
            return .invalid(reason)
        case .complete(let header, let length):
            held = []
            return .header(header, consumed: length - before)
        }
    }

    private enum Parse {
        case incomplete
        case absent
        case invalid(String)
        case complete(ProxyHeader, length: Int)
    }

    private static func parse(_ data: [UInt8]) -> Parse {
        if data.starts(with: v1Signature.prefix(data.count)) { return parseV1(data) }
        if data.starts(with: v2Signature.prefix(data.count)) { return parseV2(data) }
        return .absent
    }

    // MARK: - Version 1: one line of text

    private static func parseV1(_ data: [UInt8]) -> Parse {
        var end: Int?
        for index in data.indices.prefix(maxV1Bytes) {
            let byte = data[index]
            if byte == 0x0D {
                guard index + 1 < data.count else { break }
                guard data[index + 1] == 0x0A else { return .invalid("a PROXY v1 header has a CR without LF") }
                end = index
                break
            }
            guard byte >= 0x20 && byte < 0x7F else { return .invalid("a PROXY v1 header holds a control byte") }
        }
        guard let end else {
            return data.count >= maxV1Bytes ? .invalid("a PROXY v1 header is over 107 bytes") : .incomplete
        }
        guard end + 2 <= maxV1Bytes else { return .invalid("a PROXY v1 header is over 107 bytes") }
        let fields = data[v1Signature.count..<end].split(separator: 0x20, omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
        let length = end + 2
        switch fields.first {
        case "UNKNOWN":
            // The spec lets anything follow UNKNOWN; the connection speaks for itself.
            return .complete(ProxyHeader(), length: length)
        case "TCP4", "TCP6":
            let isIPv4 = fields[0] == "TCP4"
            guard fields.count == 5,
                let source = address(fields[1], port: fields[3], ipv4: isIPv4),
                let destination = address(fields[2], port: fields[4], ipv4: isIPv4)
            else { return .invalid("a PROXY v1 \(fields[0]) header is malformed") }
            return .complete(ProxyHeader(source: source, destination: destination), length: length)
        default:
            return .invalid("a PROXY v1 header names no known protocol (TCP4, TCP6, UNKNOWN)")
        }
    }

    /// An address of the family the v1 protocol names (an IPv4-mapped IPv6 address
    /// under TCP6 is taken, as the IPv4 address it maps).
    private static func address(_ host: String, port: String, ipv4: Bool) -> ClientAddress? {
        guard host.contains(":") != ipv4, let ip = IPAddress(host), let port = ClientAddress.port(Substring(port))
        else { return nil }
        return ClientAddress(ip, port: port)
    }

    // MARK: - Version 2: binary

    private static func parseV2(_ data: [UInt8]) -> Parse {
        guard data.count >= 16 else { return .incomplete }
        let version = data[12] >> 4
        let command = data[12] & 0x0F
        guard version == 2 else { return .invalid("a PROXY header of version \(version) (only 1 and 2 are)") }
        guard command <= 1 else { return .invalid("a PROXY v2 header with an unknown command \(command)") }
        let payload = Int(data[14]) << 8 | Int(data[15])
        guard payload <= maxV2PayloadBytes else {
            return .invalid("a PROXY v2 header of \(16 + payload) bytes (at most \(16 + maxV2PayloadBytes))")
        }
        guard data.count >= 16 + payload else { return .incomplete }
        let length = 16 + payload
        // LOCAL: the proxy's own connection (its health checks); the block, family
        // included, is skipped as the spec says.
        if command == 0 { return .complete(ProxyHeader(), length: length) }
        let family = data[13] >> 4
        let transport = data[13] & 0x0F
        guard family <= 3, transport <= 2, (family == 0) == (transport == 0) else {
            return .invalid("a PROXY v2 header with an unknown address family \(data[13])")
        }
        guard transport != 2 else { return .invalid("a PROXY v2 header for a datagram connection") }
        switch family {
        case 1, 2:
            // Source and destination addresses, then their ports.
            let size = family == 1 ? 4 : 16
            guard payload >= 2 * size + 4 else {
                return .invalid("a PROXY v2 \(family == 1 ? "AF_INET" : "AF_INET6") header is truncated")
            }
            let ports = 16 + 2 * size
            return .complete(
                ProxyHeader(
                    source: v2Address(data, at: 16, count: size, portAt: ports),
                    destination: v2Address(data, at: 16 + size, count: size, portAt: ports + 2)),
                length: length)
        case 3:
            guard payload >= 216 else { return .invalid("a PROXY v2 AF_UNIX header is truncated") }
            // A client on a UNIX socket has no address to name.
            return .complete(ProxyHeader(), length: length)
        default:
            // AF_UNSPEC: the connection speaks for itself.
            return .complete(ProxyHeader(), length: length)
        }
    }

    private static func v2Address(_ data: [UInt8], at offset: Int, count: Int, portAt: Int) -> ClientAddress {
        let ip = IPAddress(bytes: data[offset..<(offset + count)])!
        return ClientAddress(ip, port: Int(data[portAt]) << 8 | Int(data[portAt + 1]))
    }
}
