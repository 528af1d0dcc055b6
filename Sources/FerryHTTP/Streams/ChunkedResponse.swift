import FerryLoop

/// The wire form of a `200` whose body is written as it is made (HTTP/1.1 chunked
/// transfer coding) on a connection taken over from HTTP (``HTTPResponder/takeOver(_:)``),
/// for answers too big to hold whole.
///
/// A chunked body has an end of its own (the zero-size chunk, ``end``): a client that
/// sees the connection close before it knows the answer is cut short, whatever the bytes
/// so far look like. So a failure after the first byte is signalled by closing the
/// connection without ``end``, never by a status code (the head is gone already).
/// `Connection: close` ends the connection after the answer: the taken-over connection
/// does not go back to HTTP.
public enum ChunkedResponse {
    /// The status line and head of a `200` with `contentType`, chunked.
    public static func head(contentType: String) -> [UInt8] {
        var head: [UInt8] = []
        head.reserveCapacity(160)
        head.append(contentsOf: "HTTP/1.1 200 OK\r\nDate: ".utf8)
        HTTPDate().append(to: &head, now: MonotonicClock.now())
        head.append(contentsOf: "\r\nContent-Type: ".utf8)
        head.append(contentsOf: contentType.utf8)
        head.append(contentsOf: "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".utf8)
        return head
    }

    /// Writes `bytes` as one chunk (nothing for no bytes: an empty chunk is the end).
    public static func write(_ bytes: [UInt8], to tcp: TCPConnection) {
        guard !bytes.isEmpty else { return }
        tcp.write(String(bytes.count, radix: 16) + "\r\n")
        tcp.write(bytes)
        tcp.write(crlf)
    }

    /// The last chunk: the body is complete.
    public static let end: [UInt8] = Array("0\r\n\r\n".utf8)

    private static let crlf: [UInt8] = [0x0D, 0x0A]
}
