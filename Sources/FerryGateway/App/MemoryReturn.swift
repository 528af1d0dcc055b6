import CMalloc

/// glibc's allocator told to give memory back to the system once request bodies and
/// answers are freed, so the process's resident size falls back after a burst of large
/// requests instead of staying at its peak.
///
/// By default glibc raises its mmap threshold to the size of each large block freed (up
/// to 32 MiB): after one 16 MiB body, later ones come from the heap and their pages stay
/// with the process when freed, in every thread's arena. A fixed threshold (setting it
/// turns the adjustment off) keeps every block of 128 KiB or more in its own mapping,
/// unmapped when freed; the trim threshold bounds what the top of a heap keeps.
enum MemoryReturn {
    /// Blocks this large or larger are mapped on their own and unmapped when freed.
    static let mmapThresholdBytes: Int32 = 128 << 10
    /// Free memory at the top of a heap past this is given back.
    static let trimThresholdBytes: Int32 = 1 << 20

    /// Sets both thresholds for the whole process; call once, before serving.
    static func configure() {
        _ = mallopt(M_MMAP_THRESHOLD, mmapThresholdBytes)
        _ = mallopt(M_TRIM_THRESHOLD, trimThresholdBytes)
    }
}
