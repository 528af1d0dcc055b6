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

    /// Starts buffering for `loop`.
    public init(logger: Logger, loop: EventLoop) {
        self.logger = logger
        pending.reserveCapacity(16 * 1024)
        hook = IterationHook(loop: loop) { [unowned self] in self.flush() }
    }

    /// Records one answered request.
    public func request(
        method: String, route: String?, status: Int, durationNanoseconds: UInt64, bytes: Int,
        remote: String?
    ) {
        let milliseconds = Double(durationNanoseconds) / 1_000_000
        logger.append(
            to: &pending, level: status >= 500 ? .error : .info, message: "request",
            fields: [
                ("method", method), ("route", route ?? "-"), ("status", String(status)),
                ("duration_ms", String(format: "%.3f", milliseconds)), ("bytes", String(bytes)),
                ("remote", remote ?? "-"),
            ])
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
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        var parts = tm()
        var seconds = spec.tv_sec
        gmtime_r(&seconds, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
            parts.tm_hour, parts.tm_min, parts.tm_sec, spec.tv_nsec / 1_000_000)
    }
}
