import Synchronization

/// An access token that passed ``AccessTokenSigner/verify(_:now:)``: its claims, and the
/// identity the request's SQL runs as, formatted once. A class, so a cache hit costs one
/// retain rather than one per string.
public final class VerifiedToken: Sendable {
    /// The token's claims.
    public let claims: AccessTokenClaims
    /// Who is asking, as the request's SQL names it.
    public let identity: Identity

    /// The verified form of `claims`.
    public init(claims: AccessTokenClaims) {
        self.claims = claims
        identity = Identity(
            userID: claims.userID.lowercasedString, sessionID: claims.sessionID.lowercasedString,
            deviceID: claims.deviceID, isAnonymous: claims.isAnonymous)
    }
}

/// Access tokens verified recently, so that a device's next requests with the same
/// token skip the base64url decoding, the MAC and the claims reader (about three
/// quarters of an authenticated request's own work in the gateway).
///
/// A token is found only by all of its bytes, compared in constant time, so a hit is
/// exactly a token that was verified. What a hit skips is what cannot change: the
/// signature and the claims. The caller still checks the times on every hit
/// (``AccessTokenSigner/checkTimes(of:now:)``) and the revoked-session cache. Only
/// tokens that verified are stored: a forged one pays the whole check every time and
/// cannot push real ones out.
///
/// Direct-mapped: a token's slot comes from bytes of its signature, and a new token replaces
/// whatever held its slot. No eviction order to keep and no allocation on a hit. One
/// per process behind a `Mutex`; the critical section is a compare and a copy.
public final class VerifiedTokenCache: Sendable {
    /// Slots; a power of two. About 650 bytes each when full (the token, its claims
    /// and the identity's strings), so 8192 slots hold at most ~5 MiB.
    public static let defaultCapacity = 8192

    private struct Slot {
        var token: [UInt8]
        var verified: VerifiedToken
    }

    private let slots: Mutex<[Slot?]>
    private let mask: Int

    /// An empty cache of `capacity` slots (rounded up to a power of two).
    public init(capacity: Int = VerifiedTokenCache.defaultCapacity) {
        precondition(capacity > 0, "a token cache needs at least one slot")
        var size = 1
        while size < capacity { size <<= 1 }
        slots = Mutex([Slot?](repeating: nil, count: size))
        mask = size - 1
    }

    /// What `token` verified to, if it is still held.
    public func lookup(_ token: Substring) -> VerifiedToken? {
        withBytes(of: token) { bytes in
            let index = slotIndex(bytes)
            return slots.withLock { slots -> VerifiedToken? in
                guard let slot = slots[index], Self.equal(slot.token, bytes) else { return nil }
                return slot.verified
            }
        }
    }

    /// Remembers that `token` verified to `verified`, replacing its slot's token.
    public func insert(_ token: Substring, _ verified: VerifiedToken) {
        let bytes = Array(token.utf8)
        let index = bytes.withUnsafeBufferPointer { slotIndex($0) }
        slots.withLock { $0[index] = Slot(token: bytes, verified: verified) }
    }

    /// Eight bytes from the middle of the signature, spread by a multiplication
    /// (Fibonacci hashing). Only tokens that verified are stored, and their signatures
    /// are HMAC outputs no client can choose without the secret, so no keyed hash is
    /// needed against crafted collisions.
    private func slotIndex(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
        var word: UInt64 = 0
        let start = max(0, bytes.count - 16)
        for byte in bytes[start..<min(bytes.count, start + 8)] { word = word << 8 | UInt64(byte) }
        return Int(truncatingIfNeeded: (word &* 0x9E37_79B9_7F4A_7C15) >> 32) & mask
    }

    /// Equal bytes, in time that depends only on the length: 8 bytes at a time, with
    /// no early exit.
    private static func equal(_ stored: [UInt8], _ presented: UnsafeBufferPointer<UInt8>) -> Bool {
        guard stored.count == presented.count else { return false }
        return stored.withUnsafeBytes { stored in
            let presented = UnsafeRawBufferPointer(presented)
            var difference: UInt64 = 0
            var offset = 0
            while offset + 8 <= stored.count {
                difference |=
                    stored.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                    ^ presented.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                offset += 8
            }
            while offset < stored.count {
                difference |= UInt64(stored[offset] ^ presented[offset])
                offset += 1
            }
            return difference == 0
        }
    }

    private func withBytes<R>(of token: Substring, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        if let result = token.utf8.withContiguousStorageIfAvailable(body) { return result }
        return Array(token.utf8).withUnsafeBufferPointer(body)
    }
}
