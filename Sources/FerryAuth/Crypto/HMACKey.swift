import CCrypto
import Synchronization

/// An HMAC-SHA256 key, ready to sign from any thread.
///
/// OpenSSL 3's one-shot `HMAC()` looks the algorithm up on every call (about 1.5 µs of a
/// 300-byte token's 1.8 µs here); a MAC context keyed once and reset per message costs
/// about 0.35 µs. Contexts are not thread-safe, so each call borrows one from a small
/// pool (a few per key: one per thread signing at that moment) and gives it back.
public final class HMACKey: Sendable {
    private let template: OpaqueContext
    private let pool = Mutex<[OpaqueContext]>([])

    /// An `EVP_MAC_CTX` pointer that may cross threads while nobody uses it.
    private struct OpaqueContext: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    /// A key of `key`'s bytes.
    public init(_ key: [UInt8]) {
        let mac = EVP_MAC_fetch(nil, "HMAC", nil)
        precondition(mac != nil, "OpenSSL has no HMAC")
        defer { EVP_MAC_free(mac) }
        let context = EVP_MAC_CTX_new(mac)!
        let initialized = "SHA256".withCString { name in
            OSSL_MAC_PARAM_DIGEST.withCString { digestKey in
                var parameters = [
                    OSSL_PARAM_construct_utf8_string(digestKey, UnsafeMutablePointer(mutating: name), 0),
                    OSSL_PARAM_construct_end(),
                ]
                return key.withUnsafeBufferPointer { key in
                    // A zero-length key still needs a non-null pointer.
                    var empty: UInt8 = 0
                    return EVP_MAC_init(
                        context, key.baseAddress ?? withUnsafePointer(to: &empty) { $0 }, key.count, &parameters)
                }
            }
        }
        precondition(initialized == 1, "OpenSSL could not key HMAC-SHA256")
        template = OpaqueContext(pointer: context)
    }

    deinit {
        EVP_MAC_CTX_free(template.pointer)
        for context in pool.withLock({ $0 }) { EVP_MAC_CTX_free(context.pointer) }
    }

    /// HMAC-SHA256 of `data`.
    public func mac(_ data: UnsafeBufferPointer<UInt8>) -> HMACDigest {
        let context = pool.withLock { $0.popLast() } ?? OpaqueContext(pointer: EVP_MAC_CTX_dup(template.pointer)!)
        defer { pool.withLock { $0.append(context) } }
        var digest = HMACDigest()
        var length = 0
        let succeeded = withUnsafeMutableBytes(of: &digest.bytes) { output in
            // A null key re-initialises with the key already set.
            EVP_MAC_init(context.pointer, nil, 0, nil) == 1
                && EVP_MAC_update(context.pointer, data.baseAddress, data.count) == 1
                && EVP_MAC_final(context.pointer, output.baseAddress!.assumingMemoryBound(to: UInt8.self), &length, 32)
                    == 1
        }
        precondition(succeeded && length == 32, "OpenSSL HMAC-SHA256 failed")
        return digest
    }
}

/// An HMAC-SHA256 digest (a token's signature, a cursor's seal) kept inline (no
/// allocation), compared in constant time.
public struct HMACDigest: Equatable, Sendable {
    /// The digest's 32 bytes, in place.
    public var bytes: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

    /// A digest of zeros, to be written.
    public init() {}

    /// The digest's 32 bytes, copied.
    public var array: [UInt8] { withUnsafeBytes(of: bytes) { Array($0) } }

    public static func == (lhs: HMACDigest, rhs: HMACDigest) -> Bool {
        withUnsafeBytes(of: lhs.bytes) { left in
            withUnsafeBytes(of: rhs.bytes) { right in CRYPTO_memcmp(left.baseAddress, right.baseAddress, 32) == 0 }
        }
    }
}
