import FerryJSON

/// Writes a response head in HTTP/1.1 wire format.
///
/// Adds what the server owns: `Date`, `Content-Length` (not for 1xx/204/304) and
/// `Connection` (`close` when the connection ends after this response; `keep-alive`
/// for an HTTP/1.0 client that keeps it). Those three are dropped from the
/// response's own fields. A `HEAD` request gets the head a `GET` would, with no body.
enum HTTPResponseEncoder {
    /// Appends the status line and header block of `response` to `buffer`; returns
    /// whether the body must follow.
    static func encodeHead(
        _ response: HTTPResponse, context: HTTPConnectionStateMachine.ResponseContext, date: HTTPDate,
        now: UInt64, into buffer: inout [UInt8]
    ) -> Bool {
        let status = response.status
        buffer.append(contentsOf: "HTTP/1.1 ".utf8)
        buffer.appendDecimal(status.code)
        buffer.append(UInt8(ascii: " "))
        buffer.append(contentsOf: status.reasonPhrase.utf8)
        buffer.append(contentsOf: "\r\nDate: ".utf8)
        date.append(to: &buffer, now: now)
        buffer.append(contentsOf: "\r\n".utf8)
        for field in response.headers where !isServerOwned(field.name) {
            buffer.append(contentsOf: field.name.utf8)
            buffer.append(contentsOf: ": ".utf8)
            buffer.append(contentsOf: field.value.utf8)
            buffer.append(contentsOf: "\r\n".utf8)
        }
        if !status.forbidsBody {
            buffer.append(contentsOf: "Content-Length: ".utf8)
            buffer.appendDecimal(response.body.count)
            buffer.append(contentsOf: "\r\n".utf8)
        }
        if context.closesConnection {
            buffer.append(contentsOf: "Connection: close\r\n".utf8)
        } else if context.isHTTP10 {
            buffer.append(contentsOf: "Connection: keep-alive\r\n".utf8)
        }
        buffer.append(contentsOf: "\r\n".utf8)
        return !status.forbidsBody && context.method != .head && !response.body.isEmpty
    }

    /// `HTTP/1.1 100 Continue`, sent before a body the client holds back (`Expect: 100-continue`).
    static let continueHead: [UInt8] = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    private static func isServerOwned(_ name: String) -> Bool {
        switch name.utf8.count {
        case 4: name.equalsIgnoringASCIICase("date")
        case 10: name.equalsIgnoringASCIICase("connection")
        case 14: name.equalsIgnoringASCIICase("content-length")
        default: false
        }
    }
}
