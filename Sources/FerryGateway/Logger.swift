import FerryLoop
import Foundation

/// Writes log lines to standard output as text or JSON, one line per event.
///
/// Events from any thread go through ``log(_:_:_:)`` (one `write` each). Request
/// lines are hot, so each loop collects them in its own ``LogBuffer`` and writes
/// once per loop iteration. Nothing logged may contain a token or a password:
/// requests are logged by route pattern, never by URL (a stream's URL may carry
/// `?access_token=`).
public final class Logger: Sendable {
    /// Severity of an event.
    public enum Level: String, Sendable { case info, warning, error }

    /// Text or JSON.
    public let format: GatewayConfiguration.LogFormat
    private let fileDescriptor: Int32

    /// A logger writing to `fileDescriptor` (standard output by default).
    public init(format: GatewayConfiguration.LogFormat, fileDescriptor: Int32 = 1) {
        self.format = format
        self.fileDescriptor = fileDescriptor
    }

    /// Logs one event now. Safe from any thread.
    public func log(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, String> = [:]) {
        var line = ""
        append(to: &line, level: level, message: message, fields: Array(fields))
        write(line)
    }

    func write(_ text: String) {
        var text = text
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(fileDescriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if written <= 0 { return }
                offset += written
            }
        }
    }

    /// Formats one line (with its newline) onto `line`.
    func append(to line: inout String, level: Level, message: String, fields: [(String, String)]) {
        let time = Timestamp.now()
        switch format {
        case .text:
            line += "\(time) \(level.rawValue) \(message)"
            for (key, value) in fields {
                line += " \(key)="
                line += value.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" }) ? Self.quoted(value) : value
            }
        case .json:
            line += "{\"time\":\"\(time)\",\"level\":\"\(level.rawValue)\",\"msg\":\(Self.quoted(message))"
            for (key, value) in fields {
                line += ",\(Self.quoted(key)):\(Self.quoted(value))"
            }
            line += "}"
        }
        line += "\n"
    }

    /// A JSON string literal (also fine as a quoted text-log value).
    static func quoted(_ value: String) -> String {
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                out +=
                    "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count)
                    + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

/// One loop's buffer of request log lines, written once per loop iteration.
/// Loop thread only.
public final class LogBuffer {
    private let logger: Logger
    private var pending = ""
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
    /// This runs once per request, so it appends straight into the buffer: no field
    /// array, no `String(format:)`, and the timestamp's seconds are formatted once a second.
    public func request(
        method: String, route: String?, status: Int, durationNanoseconds: UInt64, bytes: Int,
        remote: String?
    ) {
        let level = status >= 500 ? Logger.Level.error : .info
        let time = clock.now()
        let microseconds = durationNanoseconds / 1_000
        var duration = String(microseconds / 1_000)
        duration += "."
        Timestamp.appendPadded(&duration, Int(microseconds % 1_000), width: 3)
        switch logger.format {
        case .text:
            pending += time
            pending += level == .info ? " info request method=" : " error request method="
            pending += method
            pending += " route="
            pending += route ?? "-"
            pending += " status="
            pending += String(status)
            pending += " duration_ms="
            pending += duration
            pending += " bytes="
            pending += String(bytes)
            pending += " remote="
            pending += remote ?? "-"
            pending += "\n"
        case .json:
            pending += "{\"time\":\""
            pending += time
            pending += level == .info ? "\",\"level\":\"info\"" : "\",\"level\":\"error\""
            pending += ",\"msg\":\"request\",\"method\":"
            pending += Logger.quoted(method)
            pending += ",\"route\":"
            pending += route.map(Logger.quoted) ?? "null"
            pending += ",\"status\":"
            pending += String(status)
            pending += ",\"duration_ms\":"
            pending += duration
            pending += ",\"bytes\":"
            pending += String(bytes)
            pending += ",\"remote\":"
            pending += remote.map(Logger.quoted) ?? "null"
            pending += "}\n"
        }
        if pending.utf8.count > 64 * 1024 { flush() }
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
    /// The current time, e.g. `2026-11-29T15:40:00.123Z`.
    static func now() -> String {
        var cache = Cache()
        return cache.now()
    }

    /// Formats the current time, reformatting the date and seconds only when the
    /// second changes (a loop logs many lines a second).
    struct Cache {
        private var second = -1
        private var prefix = ""

        mutating func now() -> String {
            var spec = timespec()
            clock_gettime(CLOCK_REALTIME, &spec)
            if spec.tv_sec != second {
                second = spec.tv_sec
                var seconds = spec.tv_sec
                var parts = tm()
                gmtime_r(&seconds, &parts)
                prefix = ""
                appendPadded(&prefix, Int(parts.tm_year) + 1900, width: 4)
                prefix += "-"
                appendPadded(&prefix, Int(parts.tm_mon) + 1, width: 2)
                prefix += "-"
                appendPadded(&prefix, Int(parts.tm_mday), width: 2)
                prefix += "T"
                appendPadded(&prefix, Int(parts.tm_hour), width: 2)
                prefix += ":"
                appendPadded(&prefix, Int(parts.tm_min), width: 2)
                prefix += ":"
                appendPadded(&prefix, Int(parts.tm_sec), width: 2)
                prefix += "."
            }
            var text = prefix
            appendPadded(&text, spec.tv_nsec / 1_000_000, width: 3)
            return text + "Z"
        }
    }

    /// Appends `value` in decimal, left-padded with zeros to `width` digits.
    static func appendPadded(_ text: inout String, _ value: Int, width: Int) {
        let digits = String(value)
        if digits.count < width { text += String(repeating: "0", count: width - digits.count) }
        text += digits
    }
}
