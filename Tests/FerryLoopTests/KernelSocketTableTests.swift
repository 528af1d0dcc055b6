import FerryLoop
import FerryTestSupport
import Testing

@Suite(.tagSelection) struct KernelSocketTableTests {
    /// The kernel answers each read of `/proc/net/tcp` with one page (26 sockets and the
    /// header): a table longer than that is read to its end, so a listener on a later
    /// page is counted as one on the first.
    @Test func listenersPastTheFirstPageOfTheTableAreCounted() throws {
        let first = try LoopbackSocket(listening: true, reusePort: true)
        let others = try (0..<40).map { _ in try LoopbackSocket(listening: true, port: first.port, reusePort: true) }
        let address = try SocketAddress(host: "127.0.0.1", port: first.port)
        #expect(TCPListener.otherListeners(on: address, excluding: []) == 1 + others.count)
        withExtendedLifetime(others) {}
    }
}
