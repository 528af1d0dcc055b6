import Glibc

/// The `Date` header value (RFC 7231 IMF-fixdate), formatted at most once a second.
///
/// One per loop: formatting a date per response would cost more than the rest of a
/// small response. Loop thread only.
final class HTTPDate {
    /// `Sun, 06 Nov 1994 08:49:37 GMT`: always 29 bytes.
    private(set) var bytes: [UInt8] = []
    private var validUntil: UInt64 = 0

    init() { bytes.reserveCapacity(29) }

    /// Appends the current date to `buffer`; `now` is the monotonic clock in nanoseconds.
    func append(to buffer: inout [UInt8], now: UInt64) {
        if now >= validUntil { refresh(now: now) }
        buffer.append(contentsOf: bytes)
    }

    private func refresh(now: UInt64) {
        var wall = timespec()
        clock_gettime(CLOCK_REALTIME, &wall)
        // Valid until the wall clock's next whole second.
        validUntil = now + UInt64(1_000_000_000 - wall.tv_nsec)
        var seconds = wall.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        bytes = HTTPDate.format(parts)
    }

    static func format(_ parts: tm) -> [UInt8] {
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        var out: [UInt8] = []
        out.reserveCapacity(29)
        func two(_ value: Int32) {
            out.append(UInt8(ascii: "0") + UInt8(value / 10))
            out.append(UInt8(ascii: "0") + UInt8(value % 10))
        }
        out.append(contentsOf: days[Int(parts.tm_wday)].utf8)
        out.append(contentsOf: ", ".utf8)
        two(parts.tm_mday)
        out.append(UInt8(ascii: " "))
        out.append(contentsOf: months[Int(parts.tm_mon)].utf8)
        out.append(UInt8(ascii: " "))
        let year = parts.tm_year + 1900
        two(year / 100)
        two(year % 100)
        out.append(UInt8(ascii: " "))
        two(parts.tm_hour)
        out.append(UInt8(ascii: ":"))
        two(parts.tm_min)
        out.append(UInt8(ascii: ":"))
        two(parts.tm_sec)
        out.append(contentsOf: " GMT".utf8)
        return out
    }
}
