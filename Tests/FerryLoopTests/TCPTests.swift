import FerryLoop
import FerryTestSupport
import Foundation
import Synchronization
import Testing

/// Echoes what it reads; counts closes.
private final class Echo: TCPConnectionDelegate {
    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) { connection.write(bytes) }
    func connectionDidReachEnd(_ connection: TCPConnection) { connection.closeAfterWrites() }
    func connectionDidDrain(_ connection: TCPConnection) {}
    func connectionDidClose(_ connection: TCPConnection, error: LoopError?) {}
}

/// Collects what it reads and reports when `expected` bytes have arrived.
private final class Collector: TCPConnectionDelegate {
    var received: [UInt8] = []
    let expected: Int
    let done: ([UInt8]) -> Void
    init(expected: Int, done: @escaping ([UInt8]) -> Void) {
        self.expected = expected
        self.done = done
    }
    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        received += bytes
        if received.count >= expected {
            connection.close()
            done(received)
        }
    }
    func connectionDidReachEnd(_ connection: TCPConnection) {}
    func connectionDidDrain(_ connection: TCPConnection) {}
    func connectionDidClose(_ connection: TCPConnection, error: LoopError?) {}
}

@Suite(.hangLimit, .tagSelection) struct TCPTests {
    @Test func echoesALargeWriteThroughTheWriteQueue() async throws {
        let loop = EventLoop.spawn(name: "echo")
        defer { loop.stop() }
        let payload = (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let received: [UInt8] = try await withCheckedThrowingContinuation { continuation in
            loop.execute {
                do {
                    let listener = try TCPListener(loop: loop, address: SocketAddress(host: "127.0.0.1", port: 0)) {
                        connection in
                        connection.delegate = Echo()
                        connection.startReading()
                    }
                    TCPConnection.connect(on: loop, to: listener.address) { result in
                        switch result {
                        case .failure(let error): continuation.resume(throwing: error)
                        case .success(let client):
                            client.delegate = Collector(expected: payload.count) { bytes in
                                listener.close()
                                continuation.resume(returning: bytes)
                            }
                            client.startReading()
                            client.write(payload)
                        }
                    }
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
        #expect(received == payload)
    }

    #if os(Linux)
        /// `TCP_QUICKACK` reads back 0 while the kernel delays ACKs (its "pingpong" mode).
        @Test func acknowledgeReceivedLeavesDelayedAckMode() async throws {
            let loop = EventLoop.spawn(name: "quickack")
            defer { loop.stop() }
            final class Sockets {
                var listener: TCPListener?
                var client: TCPConnection?
            }
            let sockets = LoopBound(sending: Sockets(), loop: loop)
            @Sendable func quickAck(_ descriptor: Int32) -> Int32 {
                var value: Int32 = -1
                var length = socklen_t(MemoryLayout<Int32>.size)
                getsockopt(descriptor, Int32(IPPROTO_TCP), TCP_QUICKACK, &value, &length)
                return value
            }
            let (delaying, afterwards): (Int32, Int32) = try await withCheckedThrowingContinuation { continuation in
                loop.execute {
                    do {
                        let listener = try TCPListener(loop: loop, address: SocketAddress(host: "127.0.0.1", port: 0)) {
                            server in
                            let descriptor = server.fileDescriptor!
                            var off: Int32 = 0
                            setsockopt(
                                descriptor, Int32(IPPROTO_TCP), TCP_QUICKACK, &off, socklen_t(MemoryLayout<Int32>.size))
                            let delaying = quickAck(descriptor)
                            server.acknowledgeReceived()
                            let afterwards = quickAck(descriptor)
                            server.close()
                            sockets.value.client?.close()
                            sockets.value.listener?.close()
                            continuation.resume(returning: (delaying, afterwards))
                        }
                        sockets.value.listener = listener
                        TCPConnection.connect(on: loop, to: listener.address) { result in
                            switch result {
                            case .failure(let error): continuation.resume(throwing: error)
                            case .success(let client): sockets.value.client = client
                            }
                        }
                    } catch {
                        continuation.resume(throwing: error)
                    }
                }
            }
            #expect(delaying == 0)
            #expect(afterwards == 1)
        }
    #endif

    /// A close after writes waits for the peer to take the queued bytes; one that reads
    /// nothing must not hold the connection forever.
    @Test func aCloseAfterWritesGivesUpOnAPeerThatReadsNothing() async throws {
        let loop = EventLoop.spawn(name: "drain")
        defer { loop.stop() }
        final class Closing: TCPConnectionDelegate {
            var onClose: (() -> Void)?
            func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {}
            func connectionDidReachEnd(_ connection: TCPConnection) {}
            func connectionDidDrain(_ connection: TCPConnection) {}
            func connectionDidClose(_ connection: TCPConnection, error: LoopError?) { onClose?() }
        }
        final class Sockets {
            var listener: TCPListener?
            var client: TCPConnection?
            var resumed = false
        }
        let sockets = LoopBound(sending: Sockets(), loop: loop)
        let payload = [UInt8](repeating: 1, count: 8 << 20)
        let closed: Bool = try await withCheckedThrowingContinuation { continuation in
            loop.execute {
                func finish(_ closed: Bool) {
                    guard !sockets.value.resumed else { return }
                    sockets.value.resumed = true
                    sockets.value.client?.close()
                    sockets.value.listener?.close()
                    continuation.resume(returning: closed)
                }
                do {
                    let listener = try TCPListener(loop: loop, address: SocketAddress(host: "127.0.0.1", port: 0)) {
                        server in
                        let closing = Closing()
                        closing.onClose = { finish(true) }
                        server.delegate = closing
                        try? server.setSendBufferSize(4096)
                        server.write(payload)
                        server.closeAfterWrites(drainMilliseconds: 200)
                    }
                    sockets.value.listener = listener
                    // The client never reads.
                    TCPConnection.connect(on: loop, to: listener.address) { result in
                        switch result {
                        case .failure(let error):
                            sockets.value.resumed = true
                            continuation.resume(throwing: error)
                        case .success(let client): sockets.value.client = client
                        }
                    }
                    loop.schedule(after: 10_000) { finish(false) }
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
        #expect(closed, "the connection still waited for its peer after 10 s")
    }

    @Test func aFlushIsReportedOnceBytesThatHadToWaitAreWritten() async throws {
        let loop = EventLoop.spawn(name: "flush")
        defer { loop.stop() }
        /// Writes `payload` on accept to a small send buffer and notes each flush.
        final class Writer: TCPConnectionDelegate {
            var flushes: [Int] = []
            var unsentAfterWrite = 0
            func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {}
            func connectionDidReachEnd(_ connection: TCPConnection) {}
            func connectionDidDrain(_ connection: TCPConnection) {}
            func connectionDidFlush(_ connection: TCPConnection) { flushes.append(connection.unsentBytes) }
            func connectionDidClose(_ connection: TCPConnection, error: LoopError?) {}
        }
        let writer = LoopBound(sending: Writer(), loop: loop)
        let payload = [UInt8](repeating: 3, count: 1 << 20)
        let received: Int = try await withCheckedThrowingContinuation { continuation in
            loop.execute {
                do {
                    let listener = try TCPListener(loop: loop, address: SocketAddress(host: "127.0.0.1", port: 0)) {
                        connection in
                        connection.delegate = writer.value
                        try? connection.setSendBufferSize(4096)
                        connection.write(Array("taken at once".utf8))
                        connection.write(payload)
                        writer.value.unsentAfterWrite = connection.unsentBytes
                    }
                    TCPConnection.connect(on: loop, to: listener.address) { result in
                        switch result {
                        case .failure(let error): continuation.resume(throwing: error)
                        case .success(let client):
                            client.delegate = Collector(expected: payload.count + 13) { bytes in
                                listener.close()
                                continuation.resume(returning: bytes.count)
                            }
                            client.startReading()
                        }
                    }
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
        #expect(received == payload.count + 13)
        // The server's loop may report the flush after the client has read the last byte:
        // wait for the report (every 10 ms, 20 s at most), then look once more, so a second
        // report made right after the first is seen too.
        func observed() async -> (unsentAfterWrite: Int, flushes: [Int]) {
            await withCheckedContinuation { continuation in
                loop.execute { continuation.resume(returning: (writer.value.unsentAfterWrite, writer.value.flushes)) }
            }
        }
        _ = try await eventuallyHolds(seconds: 20) { await !observed().flushes.isEmpty }
        let (unsentAfterWrite, flushes) = await observed()
        #expect(unsentAfterWrite > 0)
        #expect(flushes == [0])
    }

    @Test func connectsFromTheChosenSourceAddress() async throws {
        let loop = EventLoop.spawn(name: "bind-source")
        defer { loop.stop() }
        // The listener reports each accepted peer's address; 127.0.0.0/8 is all loopback.
        let peers: [String] = try await withCheckedThrowingContinuation { continuation in
            loop.execute {
                do {
                    var accepted: [String] = []
                    let listener = try TCPListener(loop: loop, address: SocketAddress(host: "127.0.0.1", port: 0)) {
                        connection in
                        accepted.append(connection.remoteAddress ?? "?")
                        connection.close()
                    }
                    let sources = try ["127.0.0.2", "127.0.0.3"].map { try SocketAddress(host: $0, port: 0) }
                    var clients: [TCPConnection] = []
                    func connectNext() {
                        guard clients.count < sources.count else {
                            // Both accepted by now or soon: wait for the listener's side.
                            loop.schedule(after: 50) {
                                listener.close()
                                for client in clients { client.close() }
                                continuation.resume(returning: accepted)
                            }
                            return
                        }
                        TCPConnection.connect(on: loop, to: listener.address, from: sources[clients.count]) { result in
                            switch result {
                            case .failure(let error):
                                listener.close()
                                continuation.resume(throwing: error)
                            case .success(let client):
                                clients.append(client)
                                connectNext()
                            }
                        }
                    }
                    connectNext()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
        #expect(peers.map { $0.split(separator: ":")[0] } == ["127.0.0.2", "127.0.0.3"])
    }

    /// The loop's tear-down closes the handle of a connect still pending and libuv then
    /// cancels it: the connect's callback must not close the handle a second time (libuv
    /// aborts the process: `uv_close: Assertion !uv__is_closing(handle)`), which a release
    /// ferry-load did when a fleet stopped with connects in flight.
    @Test func aLoopThatStopsWithAConnectPendingAbandonsIt() throws {
        // A listener that never accepts, with a backlog of 0: Linux queues one connection
        // and drops the SYNs of the others, whose connects stay pending (SYN retries).
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(fd >= 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && listen(fd, 0) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        try #require(bound)
        let target = try SocketAddress(host: "127.0.0.1", port: Int(UInt16(bigEndian: address.sin_port)))
        let loop = EventLoop.spawn(name: "connect-stop")
        let outcomes = Mutex<[Bool]>([])
        loop.execute {
            for _ in 0..<8 {
                TCPConnection.connect(on: loop, to: target) { result in
                    if case .success(let client) = result { client.close() }
                    outcomes.withLock { $0.append((try? result.get()) != nil) }
                }
            }
        }
        Thread.sleep(forTimeInterval: 0.3)
        loop.stop()
        loop.waitUntilStopped()
        // Abandoned, not failed: the completions that ran (connects the kernel queued) succeeded.
        let seen = outcomes.withLock { $0 }
        #expect(seen.allSatisfy { $0 } && seen.count < 8, "\(seen)")
    }

    @Test func bindingToAnAddressThatIsNotLocalFailsTheConnect() async throws {
        let loop = EventLoop.spawn(name: "bind-fail")
        defer { loop.stop() }
        let error: LoopError? = try await withCheckedThrowingContinuation { continuation in
            loop.execute {
                do {
                    let listener = try TCPListener(loop: loop, address: SocketAddress(host: "127.0.0.1", port: 0)) {
                        $0.close()
                    }
                    // 192.0.2.0/24 is reserved for documentation: never an address of this host.
                    let source = try SocketAddress(host: "192.0.2.1", port: 0)
                    TCPConnection.connect(on: loop, to: listener.address, from: source) { result in
                        listener.close()
                        switch result {
                        case .failure(let error): continuation.resume(returning: error)
                        case .success(let client):
                            client.close()
                            continuation.resume(returning: nil)
                        }
                    }
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
        #expect(error?.name == "EADDRNOTAVAIL")
    }

    @Test func executeFromManyThreadsRunsEveryTaskOnTheLoop() async {
        let loop = EventLoop.spawn(name: "tasks")
        defer { loop.stop() }
        final class Tally: Sendable {
            let onLoop = Mutex(0)
            let offLoop = Mutex(0)
        }
        let tally = Tally()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<1000 {
                loop.execute {
                    if loop.inEventLoop {
                        tally.onLoop.withLock { $0 += 1 }
                    } else {
                        tally.offLoop.withLock { $0 += 1 }
                    }
                }
            }
        }
        await withCheckedContinuation { continuation in loop.execute { continuation.resume() } }
        #expect(tally.onLoop.withLock { $0 } == 8000)
        #expect(tally.offLoop.withLock { $0 } == 0)
    }

    @Test func timerFiresAfterItsDelayAndCanBeCancelled() async {
        let loop = EventLoop.spawn(name: "timers")
        defer { loop.stop() }
        let fired: [String] = await withCheckedContinuation { continuation in
            loop.execute {
                var log: [String] = []
                let cancelled = loop.schedule(after: 5) { log.append("cancelled") }
                cancelled.close()
                loop.schedule(after: 10) { log.append("first") }
                loop.schedule(after: 30) {
                    log.append("second")
                    continuation.resume(returning: log)
                }
            }
        }
        #expect(fired == ["first", "second"])
    }

    @Test func listenersOnOnePortWithReusePort() throws {
        let loop = EventLoop(name: "bind")
        // Binding happens on the loop thread: run the loop briefly on this thread.
        nonisolated(unsafe) var ports: [Int] = []
        nonisolated(unsafe) var failure: Error?
        loop.execute {
            do {
                let first = try TCPListener(loop: loop, address: SocketAddress(host: "127.0.0.1", port: 0)) { _ in }
                let second = try TCPListener(
                    loop: loop, address: SocketAddress(host: "127.0.0.1", port: first.address.port)
                ) { _ in }
                ports = [first.address.port, second.address.port]
                first.close()
                second.close()
            } catch {
                failure = error
            }
            loop.stop()
        }
        loop.run()
        #expect(failure == nil)
        #expect(ports.count == 2 && ports[0] == ports[1] && ports[0] > 0)
    }
}

/// Echoes what it reads and remembers the most it ever had unsent.
private final class MeasuringEcho: TCPConnectionDelegate {
    var received = 0
    var mostUnsent = 0
    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        received += bytes.count
        connection.write(bytes)
        mostUnsent = max(mostUnsent, connection.unsentBytes)
    }
    func connectionDidReachEnd(_ connection: TCPConnection) {}
    func connectionDidDrain(_ connection: TCPConnection) {}
    func connectionDidClose(_ connection: TCPConnection, error: LoopError?) {}
}

@Suite(.hangLimit, .tagSelection) struct BackpressureTests {
    @Test func aPeerThatDoesNotReadStopsTheServerReading() async throws {
        let loop = EventLoop.spawn(name: "backpressure")
        defer { loop.stop() }
        let payload = [UInt8](repeating: 7, count: 16 << 20)
        let echo = LoopBound(sending: MeasuringEcho(), loop: loop)
        final class Sockets {
            var client: TCPConnection?
            var listener: TCPListener?
        }
        let sockets = LoopBound(sending: Sockets(), loop: loop)
        // The client sends 16 MiB and reads nothing back.
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            loop.execute {
                do {
                    let listener = try TCPListener(loop: loop, address: SocketAddress(host: "127.0.0.1", port: 0)) {
                        connection in
                        connection.highWaterMark = 256 * 1024
                        connection.delegate = echo.value
                        connection.startReading()
                    }
                    sockets.value.listener = listener
                    TCPConnection.connect(on: loop, to: listener.address) { result in
                        switch result {
                        case .failure(let error): continuation.resume(throwing: error)
                        case .success(let connection):
                            sockets.value.client = connection
                            // This client must read whatever it has queued: an echo
                            // deadlocks if both ends stop reading for their own backlog.
                            connection.highWaterMark = .max
                            connection.write(payload)
                            continuation.resume()
                        }
                    }
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
        func observed() async -> (received: Int, mostUnsent: Int) {
            await withCheckedContinuation { continuation in
                loop.execute { continuation.resume(returning: (echo.value.received, echo.value.mostUnsent)) }
            }
        }
        // First the echo must have queued up to the high-water mark (the kernel's buffers
        // full), so there is something to stop for; then the server must stop reading:
        // what it received stays the same for 20 looks 20 ms apart. 30 s at most in all.
        let deadline = ContinuousClock.now + .seconds(30)
        _ = try await eventuallyHolds(seconds: 30) { await observed().mostUnsent >= 256 * 1024 }
        var (received, mostUnsent) = await observed()
        var unchanged = 0
        while unchanged < 20 && received < payload.count && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
            let now = await observed()
            unchanged = now.received == received ? unchanged + 1 : 0
            (received, mostUnsent) = now
        }
        #expect(mostUnsent >= 256 * 1024, "the echo never queued up to the high-water mark")
        #expect(unchanged == 20, "the server went on reading: \(received) bytes")
        // The server stopped reading once its unsent echo passed the high-water mark: it holds
        // at most the mark plus one read, and the rest waits in the kernel and the client.
        #expect(received < payload.count)
        #expect(mostUnsent <= 256 * 1024 + 64 * 1024)

        // Once the client reads, everything flows.
        let echoed: Int = await withCheckedContinuation { continuation in
            loop.execute {
                let connection = sockets.value.client!
                connection.delegate = Collector(expected: payload.count) { bytes in
                    sockets.value.listener?.close()
                    continuation.resume(returning: bytes.count)
                }
                connection.startReading()
            }
        }
        #expect(echoed == payload.count)
    }
}
