import CLibUV
import Glibc

/// An IPv4 or IPv6 socket address.
public struct SocketAddress: Sendable, CustomStringConvertible {
    fileprivate var storage: sockaddr_storage

    init(_ storage: sockaddr_storage) { self.storage = storage }

    /// Parses a numeric IPv4 or IPv6 host and a port (`127.0.0.1`, `::1`).
    public init(host: String, port: Int) throws(LoopError) {
        storage = sockaddr_storage()
        let status = withUnsafeMutablePointer(to: &storage) { pointer -> Int32 in
            if host.contains(":") {
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    uv_ip6_addr(host, Int32(port), $0)
                }
            }
            return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                uv_ip4_addr(host, Int32(port), $0)
            }
        }
        if status < 0 { throw LoopError(code: status, operation: "parse address \(host)") }
    }

    /// `AF_INET` or `AF_INET6`.
    public var family: Int32 { Int32(storage.ss_family) }

    /// The port in host byte order.
    public var port: Int {
        withUnsafePointer(to: storage) { pointer in
            if family == AF_INET6 {
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    Int(UInt16(bigEndian: $0.pointee.sin6_port))
                }
            }
            return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                Int(UInt16(bigEndian: $0.pointee.sin_port))
            }
        }
    }

    /// The host as text, without the port.
    public var host: String {
        var text = [CChar](repeating: 0, count: 64)
        withUnsafePointer(to: storage) { pointer in
            if family == AF_INET6 {
                pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { _ = uv_ip6_name($0, &text, text.count) }
            } else {
                pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { _ = uv_ip4_name($0, &text, text.count) }
            }
        }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The address's bytes in network order: 4 for IPv4, 16 for IPv6.
    public var addressBytes: [UInt8] {
        withUnsafePointer(to: storage) { pointer in
            if family == AF_INET6 {
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    withUnsafeBytes(of: $0.pointee.sin6_addr) { Array($0) }
                }
            }
            return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                withUnsafeBytes(of: $0.pointee.sin_addr) { Array($0) }
            }
        }
    }

    public var description: String { family == AF_INET6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Calls `body` with the address as a `sockaddr` and its length.
    func withSockAddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        let length = socklen_t(family == AF_INET6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        return withUnsafePointer(to: storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }
}
