/// Who a request comes from: the TCP peer, or the client a trusted proxy named
/// (``TrustedProxies``), with its port when known.
public struct ClientAddress: Sendable, Hashable, CustomStringConvertible {
    /// The address.
    public let ip: IPAddress
    /// The port, nil when only the address is known (an `X-Forwarded-For` entry).
    public let port: Int?
    /// `192.0.2.1:443`, `[2001:db8::1]:443`, or the address alone without a port; made
    /// once, since every request's log line prints it.
    public let description: String

    /// The address `ip`, with `port` when known.
    public init(_ ip: IPAddress, port: Int?) {
        self.ip = ip
        self.port = port
        let host = ip.isIPv4 ? ip.description : "[\(ip)]"
        description = port.map { "\(host):\($0)" } ?? (ip.isIPv4 ? host : ip.description)
    }

    /// Reads an address as a proxy writes it in `X-Forwarded-For`: bare (`192.0.2.1`,
    /// `2001:db8::1`), with a port (`192.0.2.1:8080`, `[2001:db8::1]:8080`), or bracketed
    /// without one (`[2001:db8::1]`). Nil for anything else (`unknown`, an obfuscated name).
    public init?(forwarded text: some StringProtocol) {
        let text = Substring(text)
        if let ip = IPAddress(text) {
            self.init(ip, port: nil)
            return
        }
        var host = text
        var port: Int?
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":"), let value = Self.port(rest.dropFirst()) else { return nil }
                port = value
            }
            guard host.contains(":") else { return nil }
        } else {
            guard let colon = text.firstIndex(of: ":"), let value = Self.port(text[text.index(after: colon)...]) else {
                return nil
            }
            host = text[..<colon]
            port = value
        }
        guard let ip = IPAddress(host) else { return nil }
        self.init(ip, port: port)
    }

    /// A decimal port 0…65535 without sign or leading zeros.
    static func port(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.count <= 5, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
            text == "0" || !text.hasPrefix("0"), let value = Int(text), value <= 65535
        else { return nil }
        return value
    }
}
