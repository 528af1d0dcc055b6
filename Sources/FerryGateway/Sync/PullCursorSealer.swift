import CCrypto
import FerryAuth

/// Seals `ferry.pull`'s raw cursor text into the opaque, tamper-evident cursor
/// clients hold, and opens it again.
///
/// A sealed cursor is `base64url(raw) "." base64url(HMAC-SHA256(key, base64url(raw)
/// "." user id "." device id))`, the key being HMAC-SHA256 of the JWT secret over a
/// fixed label (so a cursor MAC can never pass as a token signature). Binding the user
/// and device means a cursor only works for the device it was issued to: the
/// `last_mutation_id` a paging cursor carries is that device's. Cursors sealed with
/// the previous JWT secret still open while keys rotate. A plain value, safe from any
/// thread; one HMAC to seal, one or two to open, no database.
struct PullCursorSealer: Sendable {
    /// Cursors longer than this are refused before any work (a real one is well under
    /// 1 KiB: two snapshots, a table name and a primary key).
    static let maximumCursorBytes = 4096
    private static let label = Array("ferry pull cursor v1".utf8)

    private let keys: [HMACKey]

    /// A sealer keyed from `secret`, also opening cursors keyed from `previousSecret`.
    init(secret: String, previousSecret: String? = nil) {
        keys = ([secret] + (previousSecret.map { [$0] } ?? [])).map { secret in
            HMACKey(Self.label.withUnsafeBufferPointer { HMACKey(Array(secret.utf8)).mac($0).array })
        }
    }

    /// A sealer keyed from the configuration's JWT secrets.
    init(configuration: GatewayConfiguration) {
        self.init(secret: configuration.jwtSecret, previousSecret: configuration.jwtPreviousSecret)
    }

    /// The opaque cursor for `raw` (ferry.pull's cursor text), for `identity`'s device.
    func seal(_ raw: some Collection<UInt8>, for identity: Identity) -> String {
        let encoded = Base64URL.encode(raw)
        return encoded + "." + Base64URL.encode(mac(keys[0], encoded, identity).array)
    }

    /// The raw cursor text inside `cursor`, or nil when it does not parse or was not
    /// sealed by us for `identity`'s device.
    func open(_ cursor: String, for identity: Identity) -> String? {
        guard cursor.utf8.count <= Self.maximumCursorBytes else { return nil }
        let parts = cursor.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let given = Base64URL.decode(parts[1]), given.count == 32,
            let raw = Base64URL.decode(parts[0])
        else { return nil }
        let encoded = String(parts[0])
        var expected = HMACDigest()
        withUnsafeMutableBytes(of: &expected.bytes) { $0.copyBytes(from: given) }
        guard keys.contains(where: { mac($0, encoded, identity) == expected }) else { return nil }
        // Sealed by us, so ferry.pull wrote it: UTF-8.
        return String(decoding: raw, as: UTF8.self)
    }

    private func mac(_ key: HMACKey, _ encoded: String, _ identity: Identity) -> HMACDigest {
        let message = Array("\(encoded).\(identity.userID).\(identity.deviceID)".utf8)
        return message.withUnsafeBufferPointer { key.mac($0) }
    }
}
