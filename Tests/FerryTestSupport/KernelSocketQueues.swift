import Foundation

/// What the kernel holds of one IPv4 TCP connection on this machine, from
/// `/proc/net/tcp` (Linux): with it a test over loopback can tell the bytes a server
/// wrote that are still in its own buffers from those the kernels took.
public struct KernelSocketQueues: Equatable, Sendable {
    /// Bytes written to the socket that its peer has not acknowledged yet (`tx_queue`).
    public var unacknowledged: Int
    /// Bytes received that the socket's owner has not read yet (`rx_queue`).
    public var unread: Int

    /// The queues of the established sockets from each `(local, remote)` port pair on
    /// 127.0.0.1, read from one pass over the table; nil unless every one was found.
    /// The kernel hands the table out in pages, and a socket that opens or closes while
    /// they are read can shift an entry out of them: a pass missing one is tried again.
    public static func of(_ pairs: [(local: Int, remote: Int)]) throws -> [KernelSocketQueues]? {
        let keys = pairs.map { (String(format: "0100007F:%04X", $0.local), String(format: "0100007F:%04X", $0.remote)) }
        for _ in 0..<5 {
            var found: [Int: KernelSocketQueues] = [:]
            // Read to the end: a /proc file's size is 0, which String(contentsOfFile:) trusts.
            let file = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/net/tcp"))
            let table = String(decoding: try file.readToEnd() ?? Data(), as: UTF8.self)
            try? file.close()
            // "  1: 0100007F:1F90 0100007F:C350 01 00000000:00000004 …": local, remote, state, tx:rx.
            for line in table.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                guard fields.count > 4, fields[3] == "01",
                    let index = keys.firstIndex(where: { fields[1] == $0.0 && fields[2] == $0.1 })
                else { continue }
                let queues = fields[4].split(separator: ":")
                guard queues.count == 2, let tx = Int(queues[0], radix: 16), let rx = Int(queues[1], radix: 16)
                else { continue }
                found[index] = KernelSocketQueues(unacknowledged: tx, unread: rx)
            }
            if found.count == pairs.count { return pairs.indices.map { found[$0]! } }
        }
        return nil
    }

    /// The queues of the established socket from `localPort` to `remotePort` on
    /// 127.0.0.1, or nil when there is none.
    public static func of(localPort: Int, remotePort: Int) throws -> KernelSocketQueues? {
        try of([(localPort, remotePort)])?.first
    }
}
