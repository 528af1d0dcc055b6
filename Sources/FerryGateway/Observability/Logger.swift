import FerryHTTP
import FerryJSON
import FerryLoop
import Foundation

/// Writes log lines to standard output as text or JSON, one line per event.
///
/// Events from any thread go through ``log(_:_:_:)`` (one `write` each). Request
/// lines are hot, so each loop collects them in its own ``LogBuffer`` and writes
/// once per loop iteration. Nothing logged may contain a token or a password:
/// requests are logged by route pattern, never by URL (a stream's URL may carry
/// `?access_token=`). Lines less severe than ``minimumLevel`` are not written; the
/// probes' request lines (`/healthz`, `/readyz`, `/metrics`: a balancer asks every
/// few seconds) are `debug`.
public final class Logger: Sendable {
    /// How lines are written: `key=value` text or one JSON object a line.
    public enum Format: String, Sendable { case text, json }

    /// Severity of an event, least severe first.
    public enum Level: String, Sendable, Comparable, CaseIterable {
        case debug, info, warning, error

        public static func < (lhs: Level, rhs: Level) -> Bool {
            allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
        }
    }

    /// Text or JSON.
    public let format: Format
    /// The least severe level written.
    public let minimumLevel: Level
    private let fileDescriptor: Int32

    /// A logger writing lines of `minimumLevel` and above to `fileDescriptor`
    /// (standard output by default).
    public init(format: Format, minimumLevel: Level = .info, fileDescriptor: Int32 = 1) {
        self.format = format
        self.minimumLevel = minimumLevel
        self.fileDescriptor = fileDescriptor
    }

    /// Logs one event now, unless `level` is below ``minimumLevel``. Safe from any thread.
    public func log(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, String> = [:]) {
        guard level >= minimumLevel else { return }
        var line: [UInt8] = []
        line.reserveCapacity(128)
        var clock = Timestamp.Cache()
        clock.appendLineStart(format: format, level: level, message: message, to: &line)
        for (key, value) in fields {
            switch format {
            case .text:
                line.append(UInt8(ascii: " "))
                line.append(contentsOf: key.utf8)
                line.append(UInt8(ascii: "="))
                if value.utf8.contains(where: Self.needsQuotesInText) {
                    JSONString.append(value, to: &line)
                } else {
                    line.append(contentsOf: value.utf8)
                }
            case .json:
                line.append(UInt8(ascii: ","))
                JSONString.append(key, to: &line)
                line.append(UInt8(ascii: ":"))
                JSONString.append(value, to: &line)
            }
        }
        line.append(contentsOf: (format == .json ? "}\n" : "\n").utf8)
        write(line)
    }

    /// A text-log value with a space, `"`, `=` or a control character is written as a
    /// JSON string, so a line stays one line of `key=value` pairs.
    private static func needsQuotesInText(_ byte: UInt8) -> Bool {
        byte <= UInt8(ascii: " ") || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "=")
    }

    func write(_ bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(fileDescriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if written <= 0 { return }
                offset += written
            }
        }
    }
}

/// One loop's buffer of request log lines, written once per loop iteration.
/// Loop thread only.
public final class LogBuffer {
    private let logger: Logger
    private var pending: [UInt8] = []
    private var hook: IterationHook?
    private var clock = Timestamp.Cache()

    /// Starts buffering for `loop`.
    public init(logger: Logger, loop: EventLoop) {
        self.logger = logger
        pending.reserveCapacity(16 * 1024)
        hook = IterationHook(loop: loop) { [unowned self] in self.flush() }
    }

    /// Records one answered request.
    ///
    /// This runs once per request, so it appends bytes straight into the buffer: no
    /// field array, no `String` building, and the timestamp's seconds are formatted
    /// once a second.
    public func request(
        method: String, route: String?, status: Int, durationNanoseconds: UInt64, bytes: Int,
        remote: String?
    ) {
        let level = Self.isProbe(route) ? Logger.Level.debug : status >= 500 ? .error : .info
        guard level >= logger.minimumLevel else { return }
        let microseconds = Int(durationNanoseconds / 1_000)
        clock.appendLineStart(format: logger.format, level: level, message: "request", to: &pending)
        switch logger.format {
        case .text:
            pending.append(contentsOf: " method=".utf8)
            pending.append(contentsOf: method.utf8)
            pending.append(contentsOf: " route=".utf8)
            pending.append(contentsOf: (route ?? "-").utf8)
            pending.append(contentsOf: " status=".utf8)
            pending.appendDecimal(status)
            pending.append(contentsOf: " duration_ms=".utf8)
            appendMilliseconds(microseconds)
            pending.append(contentsOf: " bytes=".utf8)
            pending.appendDecimal(bytes)
            pending.append(contentsOf: " remote=".utf8)
            pending.append(contentsOf: (remote ?? "-").utf8)
            pending.append(UInt8(ascii: "\n"))
        case .json:
            pending.append(contentsOf: #","method":"#.utf8)
            JSONString.append(method, to: &pending)
            pending.append(contentsOf: #","route":"#.utf8)
            appendJSON(route)
            pending.append(contentsOf: #","status":"#.utf8)
            pending.appendDecimal(status)
            pending.append(contentsOf: #","duration_ms":"#.utf8)
            appendMilliseconds(microseconds)
            pending.append(contentsOf: #","bytes":"#.utf8)
            pending.appendDecimal(bytes)
            pending.append(contentsOf: #","remote":"#.utf8)
            appendJSON(remote)
            pending.append(contentsOf: "}\n".utf8)
        }
        if pending.count > 64 * 1024 { flush() }
    }

    /// Whether `route` is one a load balancer or Prometheus asks all the time.
    private static func isProbe(_ route: String?) -> Bool {
        route == "/healthz" || route == "/readyz" || route == "/metrics"
    }

    /// `12.345`: milliseconds with three decimals.
    private func appendMilliseconds(_ microseconds: Int) {
        pending.appendDecimal(microseconds / 1_000)
        pending.append(UInt8(ascii: "."))
        pending.appendDecimal(microseconds % 1_000, minimumDigits: 3)
    }

    private func appendJSON(_ text: String?) {
        if let text { JSONString.append(text, to: &pending) } else { pending.append(contentsOf: "null".utf8) }
    }

    /// Writes what is buffered.
    public func flush() {
        guard !pending.isEmpty else { return }
        logger.write(pending)
        pending.removeAll(keepingCapacity: true)
    }

    /// Flushes and stops.
    public func close() {
        flush()
        hook?.close()
        hook = nil
    }
}

/// RFC 3339 timestamps in UTC with milliseconds, as PROTOCOL.md and logs use.
enum Timestamp {
    /// Formats the current time, e.g. `2026-11-29T15:40:00.123Z`, reformatting the date
    /// and seconds only when the second changes (a loop logs many lines a second).
    struct Cache {
        private var second = -1
        /// `2026-11-29T15:40:00.`
        private var prefix: [UInt8] = []

        /// Appends the current time.
        mutating func append(to bytes: inout [UInt8]) {
            var spec = timespec()
            clock_gettime(CLOCK_REALTIME, &spec)
            if spec.tv_sec != second {
                second = spec.tv_sec
                var seconds = spec.tv_sec
                var parts = tm()
                gmtime_r(&seconds, &parts)
                prefix.removeAll(keepingCapacity: true)
                prefix.appendDecimal(Int(parts.tm_year) + 1900, minimumDigits: 4)
                prefix.append(UInt8(ascii: "-"))
                prefix.appendDecimal(Int(parts.tm_mon) + 1, minimumDigits: 2)
                prefix.append(UInt8(ascii: "-"))
                prefix.appendDecimal(Int(parts.tm_mday), minimumDigits: 2)
                prefix.append(UInt8(ascii: "T"))
                prefix.appendDecimal(Int(parts.tm_hour), minimumDigits: 2)
                prefix.append(UInt8(ascii: ":"))
                prefix.appendDecimal(Int(parts.tm_min), minimumDigits: 2)
                prefix.append(UInt8(ascii: ":"))
                prefix.appendDecimal(Int(parts.tm_sec), minimumDigits: 2)
                prefix.append(UInt8(ascii: "."))
            }
            bytes.append(contentsOf: prefix)
            bytes.appendDecimal(spec.tv_nsec / 1_000_000, minimumDigits: 3)
            bytes.append(UInt8(ascii: "Z"))
        }

        /// The start every line shares: `<time> <level> <message>` as text, or
        /// `{"time":…,"level":…,"msg":…` (left open for more members) as JSON.
        mutating func appendLineStart(
            format: Logger.Format, level: Logger.Level, message: String, to bytes: inout [UInt8]
        ) {
            switch format {
            case .text:
                append(to: &bytes)
                bytes.append(UInt8(ascii: " "))
                bytes.append(contentsOf: level.rawValue.utf8)
                bytes.append(UInt8(ascii: " "))
                bytes.append(contentsOf: message.utf8)
            case .json:
                bytes.append(contentsOf: #"{"time":""#.utf8)
                append(to: &bytes)
                bytes.append(contentsOf: #"","level":""#.utf8)
                bytes.append(contentsOf: level.rawValue.utf8)
                bytes.append(contentsOf: #"","msg":"#.utf8)
                JSONString.append(message, to: &bytes)
            }
        }
    }
}
