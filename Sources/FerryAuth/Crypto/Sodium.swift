import CSodium

/// libsodium, initialized once per process before first use.
enum Sodium {
    /// True once `sodium_init()` has run; reading it runs it, once, thread-safely.
    static let isReady: Bool = {
        precondition(sodium_init() >= 0, "libsodium failed to initialize")
        return true
    }()

    /// Fills `buffer` with cryptographically secure random bytes. Any thread.
    static func randomBytes(_ buffer: UnsafeMutableRawBufferPointer) {
        precondition(isReady)
        randombytes_buf(buffer.baseAddress!, buffer.count)
    }
}
