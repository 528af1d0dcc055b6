import Glibc

/// Nanoseconds on `CLOCK_MONOTONIC`: one clock for every thread and every process of
/// this machine, so a commit timed in one process and a cue timed in another compare.
public func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}
