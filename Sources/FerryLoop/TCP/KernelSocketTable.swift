import Glibc

/// Linux's table of TCP sockets (`/proc/net/tcp`, `/proc/net/tcp6`), read for the
/// sockets listening on an address. Each line after the header is
/// `sl local_address rem_address st … inode …`, the address as hex words in host
/// byte order (`0100007F:1F90` is 127.0.0.1:8080 on a little-endian machine) and
/// `st` `0A` for `LISTEN`.
struct KernelSocketTable {
    private let lines: [Substring]

    /// The table as text.
    init(_ text: String) {
        lines = text.split(separator: "\n").dropFirst().map { $0 }
    }

    /// The table of `family` (`AF_INET` or `AF_INET6`) of this network namespace; empty
    /// when it cannot be read (not Linux, no /proc).
    static func read(family: Int32) -> KernelSocketTable {
        KernelSocketTable(readToEnd(family == AF_INET6 ? "/proc/net/tcp6" : "/proc/net/tcp") ?? "")
    }

    /// The whole of the file at `path`, read until `read` answers 0; nil when it cannot be
    /// opened or a read fails.
    ///
    /// The kernel answers each `read` of the table with at most a page of lines, and the
    /// file's size is 0: Foundation's `String(contentsOfFile:)` took the first short
    /// answer for the end and saw only the first 26 sockets, so a listener further down
    /// was never counted once the namespace held more.
    static func readToEnd(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count == 0 { return String(decoding: bytes, as: UTF8.self) }
            if count < 0 {
                if errno == EINTR { continue }
                return nil
            }
            bytes.append(contentsOf: chunk[..<count])
        }
    }

    /// The inodes of the sockets listening on exactly `address`.
    func listeners(on address: SocketAddress) -> Set<UInt64> {
        let wanted = Self.text(of: address)
        var inodes: Set<UInt64> = []
        for line in lines {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count > 9, fields[3] == "0A", fields[1] == wanted, let inode = UInt64(fields[9]) else {
                continue
            }
            inodes.insert(inode)
        }
        return inodes
    }

    /// `address` as the table writes it: each 32-bit word of the IP in host byte order
    /// as 8 hex digits, `:`, the port as 4.
    static func text(of address: SocketAddress) -> Substring {
        var words: [UInt32] = []
        address.withSockAddr { pointer, _ in
            if address.family == AF_INET6 {
                pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    withUnsafeBytes(of: $0.pointee.sin6_addr) { ip in
                        words = (0..<4).map { ip.loadUnaligned(fromByteOffset: $0 * 4, as: UInt32.self) }
                    }
                }
            } else {
                pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { words = [$0.pointee.sin_addr.s_addr] }
            }
        }
        let hex = words.map { hexDigits(UInt64($0), count: 8) }.joined()
        return Substring(hex + ":" + hexDigits(UInt64(address.port), count: 4))
    }

    private static func hexDigits(_ value: UInt64, count: Int) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, count - digits.count)) + digits
    }
}
