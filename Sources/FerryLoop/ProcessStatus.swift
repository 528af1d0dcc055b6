import Foundation

/// What Linux says of a process in `/proc/<pid>/status`: the memory figures a benchmark
/// or a test compares before and after a load.
public enum ProcessStatus {
    /// The field `name` of process `pid` in KiB (`VmRSS`: resident now; `VmHWM`: the most
    /// it ever had resident); nil when the process or the field is not there.
    public static func kibibytes(_ name: String, of pid: Int32) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") })
        else { return nil }
        // `VmRSS:\t   1234 kB`
        let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
        return fields.count >= 2 ? Int(fields[1]) : nil
    }
}
