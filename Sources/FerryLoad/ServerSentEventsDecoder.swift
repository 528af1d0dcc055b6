/// One thing a Server-Sent Events stream delivered.
public enum ServerSentEvent: Equatable, Sendable {
    /// An event: its `event:` type (`message` when none was given) and its `data:`
    /// lines joined with `\n`.
    case message(type: String, data: [UInt8])
    /// A comment line (`: ping`), Ferry's heartbeat on SSE.
    case comment
}

/// Reads events from the body of a `text/event-stream` response (after any chunked
/// transfer coding is removed): `event:` and `data:` lines, dispatched at a blank line,
/// comments (`:`) reported as they come. Lines end with `\n`, `\r\n` or `\r`.
public struct ServerSentEventsDecoder {
    /// Longest line accepted.
    public var maximumLineLength = 1 << 20

    private var line: [UInt8] = []
    private var eventType: [UInt8] = []
    private var data: [UInt8] = []
    private var hasData = false
    private var lastWasCarriageReturn = false

    /// Creates an empty decoder.
    public init() {}

    /// Feeds body bytes and returns the events they completed, in order.
    public mutating func decode(_ bytes: some Collection<UInt8>) throws(SSEProtocolError) -> [ServerSentEvent] {
        var events: [ServerSentEvent] = []
        for byte in bytes {
            if byte == 10 && lastWasCarriageReturn {
                lastWasCarriageReturn = false
                continue
            }
            lastWasCarriageReturn = byte == 13
            if byte == 10 || byte == 13 {
                if let event = endLine() { events.append(event) }
            } else {
                guard line.count < maximumLineLength else { throw SSEProtocolError(description: "line too long") }
                line.append(byte)
            }
        }
        return events
    }

    private mutating func endLine() -> ServerSentEvent? {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty {
            guard hasData else {
                eventType.removeAll()
                return nil
            }
            let type = eventType.isEmpty ? "message" : String(decoding: eventType, as: UTF8.self)
            let event = ServerSentEvent.message(type: type, data: data)
            eventType.removeAll()
            data.removeAll()
            hasData = false
            return event
        }
        if line[0] == UInt8(ascii: ":") { return .comment }
        let colon = line.firstIndex(of: UInt8(ascii: ":")) ?? line.endIndex
        let name = line[..<colon]
        var value = colon < line.endIndex ? line[(colon + 1)...] : []
        if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        if name.elementsEqual("event".utf8) {
            eventType = Array(value)
        } else if name.elementsEqual("data".utf8) {
            if hasData { data.append(10) }
            data += value
            hasData = true
        }
        return nil
    }
}

/// A malformed event stream.
public struct SSEProtocolError: Error, Equatable, CustomStringConvertible {
    /// What was wrong.
    public let description: String
}

/// Removes the chunked transfer coding (RFC 9112 7.1) from a response body: sizes in
/// hex, optional extensions, the data, a CRLF; a zero-size chunk ends the body.
public struct ChunkedBodyDecoder {
    private enum State {
        case size
        case data(remaining: Int)
        case dataEnd, finished
    }
    private var state = State.size
    private var sizeLine: [UInt8] = []

    /// Creates a decoder at the start of a body.
    public init() {}

    /// Whether the last chunk has arrived.
    public var isFinished: Bool {
        if case .finished = state { return true }
        return false
    }

    /// Feeds raw body bytes and returns the data they carried.
    public mutating func decode(_ bytes: some Collection<UInt8>) throws(SSEProtocolError) -> [UInt8] {
        var output: [UInt8] = []
        var index = bytes.startIndex
        while index != bytes.endIndex {
            switch state {
            case .size:
                let byte = bytes[index]
                index = bytes.index(after: index)
                if byte == 10 {
                    let text = String(decoding: sizeLine, as: UTF8.self)
                    let digits = text.prefix { $0.isHexDigit }
                    guard !digits.isEmpty, digits.count <= 8, let size = Int(digits, radix: 16) else {
                        throw SSEProtocolError(description: "bad chunk size line")
                    }
                    sizeLine.removeAll()
                    state = size == 0 ? .finished : .data(remaining: size)
                } else if byte != 13 {
                    guard sizeLine.count < 1024 else { throw SSEProtocolError(description: "chunk size line too long") }
                    sizeLine.append(byte)
                }
            case .data(let remaining):
                let end = bytes.index(index, offsetBy: remaining, limitedBy: bytes.endIndex) ?? bytes.endIndex
                output += bytes[index..<end]
                let taken = bytes.distance(from: index, to: end)
                index = end
                state = taken == remaining ? .dataEnd : .data(remaining: remaining - taken)
            case .dataEnd:
                // The CRLF after a chunk's data.
                let byte = bytes[index]
                index = bytes.index(after: index)
                if byte == 10 {
                    state = .size
                } else if byte != 13 {
                    throw SSEProtocolError(description: "chunk data not followed by CRLF")
                }
            case .finished:
                return output
            }
        }
        return output
    }
}
