import Glibc

/// The monotonic clock Ferry measures durations with (`CLOCK_MONOTONIC`): it never
/// jumps, and it is one clock for every thread and process of a machine, so a time
/// taken in one process compares with one taken in another.
public enum MonotonicClock {
    /// Nanoseconds since an arbitrary start.
    @inline(__always)
    public static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}
