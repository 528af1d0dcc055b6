/// One event of a `text/event-stream` body (WHATWG HTML, "Server-sent events").
struct ServerSentEvent: Sendable, Equatable {
    /// The `event:` field, `message` when the event named none.
    var type: String
    /// The `data:` lines joined with `\n`.
    var data: String
    /// The last `id:` seen so far in the stream (it carries over to later events).
    var lastEventID: String
}

/// An `text/event-stream` parser: bytes in, events out, no I/O.
///
/// Lines end with `\r\n`, `\n` or a lone `\r`, and may be split anywhere between two
/// chunks. `:` lines are comments (Ferry's `: ping` heartbeat); `event`, `data`, `id` and
/// `retry` are the fields, any other field is ignored; a blank line dispatches the event
/// (none when it had no `data`). A server cannot make it hold more than
/// ``maximumLineBytes`` of an unfinished line nor ``maximumEventBytes`` of one event's
/// data: past either, ``parse(_:)`` throws and the stream is to be dropped.
struct ServerSentEventParser: Sendable {
    /// A server broke the parser's bounds; the connection must be closed.
    struct Overflow: Error, Equatable, CustomStringConvertible {
        var description: String
    }

    /// The longest line accepted, in bytes without its line end.
    let maximumLineBytes: Int
    /// The most bytes of `data` one event may carry (its lines and their joining `\n`s).
    let maximumEventBytes: Int
    /// The last `retry:` hint, in milliseconds (digits only, as the spec says).
    private(set) var retryMilliseconds: Int?

    private var line: [UInt8] = []
    private var lastByteWasCarriageReturn = false
    private var atStreamStart = true
    private var eventType = ""
    private var data: [UInt8] = []
    private var hasData = false
    private var lastEventID = ""

    /// A parser with the given bounds (64 KiB lines and events unless given: Ferry's own
    /// messages are one short line each).
    init(maximumLineBytes: Int = 64 * 1024, maximumEventBytes: Int = 64 * 1024) {
        self.maximumLineBytes = max(1, maximumLineBytes)
        self.maximumEventBytes = max(1, maximumEventBytes)
    }

    /// Feeds the next bytes of the body; returns the events they completed, in order.
    mutating func parse(_ bytes: some Sequence<UInt8>) throws(Overflow) -> [ServerSentEvent] {
        var events: [ServerSentEvent] = []
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "\n") where lastByteWasCarriageReturn:
                // The second half of a `\r\n`, whose `\r` already ended the line.
                lastByteWasCarriageReturn = false
            case UInt8(ascii: "\r"), UInt8(ascii: "\n"):
                lastByteWasCarriageReturn = byte == UInt8(ascii: "\r")
                if let event = try endLine() { events.append(event) }
            default:
                lastByteWasCarriageReturn = false
                guard line.count < maximumLineBytes else {
                    throw Overflow(description: "an event-stream line is over \(maximumLineBytes) bytes")
                }
                line.append(byte)
            }
        }
        return events
    }

    private mutating func endLine() throws(Overflow) -> ServerSentEvent? {
        defer { line.removeAll(keepingCapacity: line.count <= 4096) }
        if atStreamStart {
            atStreamStart = false
            // A UTF-8 byte-order mark may open the stream and is not part of the first line.
            if line.starts(with: [0xEF, 0xBB, 0xBF]) { line.removeFirst(3) }
        }
        guard !line.isEmpty else { return dispatch() }
        if line.first == UInt8(ascii: ":") { return nil }
        let colon = line.firstIndex(of: UInt8(ascii: ":"))
        let name = colon.map { line[..<$0] } ?? line[...]
        var value = colon.map { line[($0 + 1)...] } ?? []
        if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        switch String(decoding: name, as: UTF8.self) {
        case "event":
            eventType = String(decoding: value, as: UTF8.self)
        case "data":
            let added = value.count + (hasData ? 1 : 0)
            guard data.count + added <= maximumEventBytes else {
                throw Overflow(description: "an event's data is over \(maximumEventBytes) bytes")
            }
            if hasData { data.append(UInt8(ascii: "\n")) }
            data.append(contentsOf: value)
            hasData = true
        case "id" where !value.contains(0):
            lastEventID = String(decoding: value, as: UTF8.self)
        case "retry" where !value.isEmpty && value.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }):
            // At most nine digits are read, so no server can overflow it.
            retryMilliseconds = value.prefix(9).reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
        default:
            break
        }
        return nil
    }

    private mutating func dispatch() -> ServerSentEvent? {
        defer {
            eventType = ""
            data.removeAll(keepingCapacity: data.count <= 4096)
            hasData = false
        }
        guard hasData else { return nil }
        return ServerSentEvent(
            type: eventType.isEmpty ? "message" : eventType, data: String(decoding: data, as: UTF8.self),
            lastEventID: lastEventID)
    }
}
