import Glibc

/// A response as ``HTTPTestClient`` read it off the wire.
public struct HTTPTestResponse: Sendable {
    /// The status code.
    public var status: Int
    /// Header fields in the order received.
    public var headers: [(name: String, value: String)]
    /// The body bytes (empty for `HEAD`, 204 and 304).
    public var body: [UInt8]

    /// The first value of `name`, compared case-insensitively.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// The body as UTF-8 text.
    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// Why ``HTTPTestClient`` gave up.
public struct HTTPTestClientError: Error, Equatable, CustomStringConvertible {
    public var description: String

    public init(description: String) {
        self.description = description
    }

    /// A receive waited its whole timeout and nothing came.
    public static let receiveTimedOut = HTTPTestClientError(description: "receive timed out")

    /// A connect to `host:port` that nothing listens on (ECONNREFUSED).
    public static func refused(port: Int, host: String = "127.0.0.1") -> HTTPTestClientError {
        HTTPTestClientError(description: "connect \(host):\(port): errno \(ECONNREFUSED)")
    }

    /// The server closed the connection (an end of stream or a reset) while more was awaited.
    public static let connectionEnded = HTTPTestClientError(description: "connection closed by the server")

    /// A chunked body whose connection ended before its last chunk, after `received` bytes.
    public static func truncatedBody(received: Int) -> HTTPTestClientError {
        HTTPTestClientError(description: "chunked body cut short after \(received) bytes")
    }
}

/// A small blocking HTTP/1.1 client over a plain socket, for tests of a real server.
///
/// Sends exactly the bytes it is given (so tests can pipeline, split or garble
/// requests) and reads responses one by one. Every receive waits at most `timeout`
/// seconds, so a test can never hang on a silent server. One thread at a time.
public final class HTTPTestClient {
    private let fd: Int32
    private var buffer: [UInt8] = []
    private var closed = false

    /// Connects to `host:port` (numeric IPv4); receives time out after `timeout` seconds.
    /// `source` binds the local end to that address first (any of 127.0.0.0/8 works on
    /// loopback), so a test can be several clients as the server counts them.
    /// `receiveBufferBytes` shrinks the kernel's receive buffer (before connecting, so
    /// the window follows), for tests of a client that stops reading.
    public init(
        host: String = "127.0.0.1", port: Int, timeout: Double = 5, source: String? = nil,
        receiveBufferBytes: Int32? = nil
    ) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HTTPTestClientError(description: "socket: errno \(errno)") }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        setTimeout(timeout)
        if var size = receiveBufferBytes {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            inet_pton(AF_INET, source, &local.sin_addr)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard bound == 0 else {
                let code = errno
                close()
                throw HTTPTestClientError(description: "bind \(source): errno \(code)")
            }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, host, &address.sin_addr)
        let status = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard status == 0 else {
            let code = errno
            // close(), not Glibc.close: a class whose init throws once every property is
            // set still runs deinit, which would close the descriptor number a second
            // time, by then perhaps another thread's socket (a PostgreSQL connection
            // that then never heard back: the rare 30 s connect timeouts).
            close()
            throw HTTPTestClientError(description: "connect \(host):\(port): errno \(code)")
        }
    }

    deinit { close() }

    /// The local end's port (the server sees the client as `127.0.0.1:<localPort>`).
    public var localPort: Int {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let status = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        precondition(status == 0, "getsockname on a connected socket failed: errno \(errno)")
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Changes how long each receive and send may wait, seconds.
    public func setTimeout(_ timeout: Double) {
        var time = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
    }

    // MARK: - Sending

    /// Sends `text` as UTF-8, all of it.
    public func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// Sends `bytes`, all of them.
    public func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { throw HTTPTestClientError(description: "send: errno \(errno)") }
            sent += count
        }
    }

    /// Sends what the kernel takes of `bytes` at once, without waiting; returns how many
    /// it took, 0 when its buffers are full (the server stopped reading). Throws once the
    /// connection is gone (reset or closed by the server).
    public func sendWithoutWaiting(_ bytes: [UInt8]) throws -> Int {
        let count = bytes.withUnsafeBytes {
            Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
        }
        if count >= 0 { return count }
        if errno == EAGAIN || errno == EWOULDBLOCK { return 0 }
        throw HTTPTestClientError(description: "send: errno \(errno)")
    }

    /// What ``floodUntilRefused(_:)`` left: the bytes the kernel took, and how it stopped.
    public struct Flood: Sendable {
        /// Bytes the kernel took, all sends together.
        public var taken: Int
        /// The kernel took nothing 25 tries in a row, 20 ms apart: the server stopped reading.
        public var refused: Bool
        /// The server closed (or reset) the connection.
        public var closed: Bool
    }

    /// Sends `bytes` over and over without reading anything, until the kernel has taken
    /// nothing for half a second (25 tries 20 ms apart), the server closed the connection,
    /// 64 MB went, or 2,000 tries: for tests of a server that must stop reading a client
    /// that reads nothing. Blocking, and it sleeps on the thread: a `Task.sleep` resumed
    /// late on a loaded machine would stretch the half second past a server's idle timeout.
    public func floodUntilRefused(_ bytes: [UInt8]) -> Flood {
        var flood = Flood(taken: 0, refused: false, closed: false)
        var refusedInARow = 0
        for _ in 0..<2000 where refusedInARow < 25 && flood.taken < 64 << 20 {
            guard let taken = try? sendWithoutWaiting(bytes) else {
                flood.closed = true
                return flood
            }
            flood.taken += taken
            refusedInARow = taken == 0 ? refusedInARow + 1 : 0
            if taken == 0 { usleep(20_000) }
        }
        flood.refused = refusedInARow == 25
        return flood
    }

    /// Sends a request with `Host` and (for a body) `Content-Length`, and reads its response.
    public func request(
        _ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8] = []
    ) throws -> HTTPTestResponse {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: test\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty { head += "Content-Length: \(body.count)\r\n" }
        try send(Array((head + "\r\n").utf8) + body)
        return try readResponse(toHead: method == "HEAD")
    }

    // MARK: - Receiving

    /// Reads one response. `toHead`: it answers a `HEAD` request (no body follows).
    public func readResponse(toHead: Bool = false) throws -> HTTPTestResponse {
        var headEnd: Int?
        while headEnd == nil {
            headEnd = endOfHead()
            if headEnd == nil { try receiveMore() }
        }
        let head = String(decoding: buffer[..<headEnd!], as: UTF8.self)
        buffer.removeFirst(headEnd! + 4)
        var lines = head.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw HTTPTestClientError(description: "bad status line in \(head)")
        }
        var response = HTTPTestResponse(status: status, headers: [], body: [])
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            response.headers.append(
                (String(line[..<colon]), line[line.index(after: colon)...].trimmingPrefix(" ").description))
        }
        if toHead || status == 204 || status == 304 || status < 200 { return response }
        if response.header("Transfer-Encoding")?.lowercased() == "chunked" {
            response.body = try readChunkedBody()
        } else if let length = response.header("Content-Length").flatMap({ Int($0) }) {
            while buffer.count < length { try receiveMore() }
            response.body = Array(buffer[..<length])
            buffer.removeFirst(length)
        } else {
            // No length: the body runs to the end of the connection.
            while (try? receiveMore()) != nil {}
            response.body = buffer
            buffer = []
        }
        return response
    }

    /// A chunked body, de-chunked (trailers dropped): after ``readResponse(toHead:)`` read
    /// its head only, or from there. A connection that ends before the zero-size chunk
    /// throws ``HTTPTestClientError/truncatedBody(received:)``: the server cut the answer short.
    public func readChunkedBody() throws -> [UInt8] {
        var body: [UInt8] = []
        do {
            while true {
                let line = String(decoding: try readThrough([0x0D, 0x0A]).dropLast(2), as: UTF8.self)
                guard let size = Int(line.split(separator: ";").first ?? "", radix: 16), size >= 0 else {
                    throw HTTPTestClientError(description: "bad chunk size line \(line)")
                }
                if size == 0 {
                    while try readThrough([0x0D, 0x0A]).count > 2 {}
                    return body
                }
                body += try readBytes(size)
                guard try readBytes(2) == [0x0D, 0x0A] else {
                    throw HTTPTestClientError(description: "a chunk does not end with CRLF")
                }
            }
        } catch let error as HTTPTestClientError where error == .connectionEnded {
            throw HTTPTestClientError.truncatedBody(received: body.count)
        }
    }

    /// Reads exactly `count` raw bytes (after a protocol switch, say).
    public func readBytes(_ count: Int) throws -> [UInt8] {
        while buffer.count < count { try receiveMore() }
        defer { buffer.removeFirst(count) }
        return Array(buffer[..<count])
    }

    /// The bytes received and not yet read, or, when there are none, whatever the next
    /// receive brings (after a protocol switch, for a decoder to take).
    public func readAvailable() throws -> [UInt8] {
        if buffer.isEmpty { try receiveMore() }
        defer { buffer = [] }
        return buffer
    }

    /// Reads up to and including the first `delimiter` (an SSE event's blank line, say).
    public func readThrough(_ delimiter: [UInt8]) throws -> [UInt8] {
        var searchFrom = 0
        while true {
            if buffer.count >= delimiter.count {
                for index in searchFrom...(buffer.count - delimiter.count)
                where buffer[index..<(index + delimiter.count)].elementsEqual(delimiter) {
                    defer { buffer.removeFirst(index + delimiter.count) }
                    return Array(buffer[..<(index + delimiter.count)])
                }
                searchFrom = buffer.count - delimiter.count + 1
            }
            try receiveMore()
        }
    }

    /// Waits up to the receive timeout for the server to close; true when it did
    /// (end of stream or reset) and no unread bytes were left.
    public func waitForClose() -> Bool {
        while true {
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count == 0 { return true }
            if count < 0 { return errno == ECONNRESET }
            buffer += chunk[..<count]
        }
    }

    /// Bytes received but not consumed by ``readResponse(toHead:)``.
    public var unreadBytes: [UInt8] { buffer }

    /// Closes the socket.
    public func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(fd)
    }

    /// Closes the socket with a TCP reset (`SO_LINGER` 0), as a client that crashed does:
    /// the server's next read fails at once, where a plain close is only an end of input.
    public func reset() {
        guard !closed else { return }
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close()
    }

    private func receiveMore() throws {
        var chunk = [UInt8](repeating: 0, count: 16384)
        let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if count > 0 {
            buffer += chunk[..<count]
            return
        }
        if count == 0 || (count < 0 && errno == ECONNRESET) { throw HTTPTestClientError.connectionEnded }
        throw errno == EAGAIN
            ? HTTPTestClientError.receiveTimedOut : HTTPTestClientError(description: "recv: errno \(errno)")
    }

    private func endOfHead() -> Int? {
        guard buffer.count >= 4 else { return nil }
        for index in 0...(buffer.count - 4)
        where buffer[index] == 13 && buffer[index + 1] == 10 && buffer[index + 2] == 13 && buffer[index + 3] == 10 {
            return index
        }
        return nil
    }
}
