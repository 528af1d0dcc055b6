import Foundation

/// The rotation of one presented refresh token (docs/PROTOCOL.md "Accounts", refresh):
/// its successor, and what the database is given to tell the tokens of a session apart
/// and to answer a retry within the grace window with the same successor.
///
/// A token made by a rotation is 48 bytes in base64url (64 characters): the session's
/// *chain* (16 bytes, the same in every token of the session) and 32 random bytes. A
/// session's first token (``RefreshToken/generate()``, 32 random bytes) has no chain
/// inside; its chain is the first 16 bytes of its SHA-256, so every token of a session,
/// the first included, names the same chain. The database keeps the chain's hash on the
/// session: a token it no longer stores (rotated twice or more) is still known as the
/// session's and revokes it when presented, without a row per token ever issued.
///
/// The successor is kept in the database only sealed with the presented token (its
/// random bytes XOR a SHA-256 of the presented token that is not the hash stored), so the
/// database, which holds hashes only, cannot open it; a client presenting the same token
/// again within the window can, through the gateway (``unseal(_:)``).
///
/// All of this is of the presented token's body, without its shard prefix
/// (``RefreshToken/body(of:)``); the successor is a body too, sent with the user's shard
/// prefix (``RefreshToken/issued(_:shard:)``).
public struct RefreshRotation: Sendable {
    /// The presented token's body: as sent, without its shard prefix.
    public let presented: String
    /// The successor's body: the session's chain and 32 new random bytes.
    public let successor: String
    /// The lowercase hex SHA-256 of the presented token (``RefreshToken/hash(_:)``).
    public let presentedHash: String
    /// The lowercase hex SHA-256 of the successor.
    public let successorHash: String
    /// The lowercase hex SHA-256 of the chain: how the database finds the session of a
    /// token it no longer stores.
    public let chainHash: String
    /// The successor's random bytes sealed with the presented token, base64url.
    public let sealedSuccessor: String

    private let chain: [UInt8]

    /// Bytes in a chain.
    static let chainBytes = 16
    /// Bytes in a token made by a rotation: the chain and 32 random bytes.
    static let tokenBytes = chainBytes + 32

    /// A rotation of `presented` with a new random successor. Any thread; microseconds.
    public init(presented: String) {
        let presented = RefreshToken.body(of: presented)
        self.presented = presented
        chain = Self.chain(of: presented)
        var random = [UInt8](repeating: 0, count: 32)
        random.withUnsafeMutableBytes { Sodium.randomBytes($0) }
        successor = Base64URL.encode(chain + random)
        presentedHash = RefreshToken.hash(presented)
        successorHash = RefreshToken.hash(successor)
        chainHash = SHA256Digest.hex(chain)
        sealedSuccessor = Base64URL.encode(zip(random, Self.pad(presented)).map { $0 ^ $1 })
    }

    /// The successor an earlier rotation of the same token sealed (`sealed`, from the
    /// database); nil when `sealed` is not 32 bytes in base64url.
    public func unseal(_ sealed: String) -> String? {
        guard let bytes = Base64URL.decode(sealed), bytes.count == 32 else { return nil }
        return Base64URL.encode(chain + zip(bytes, Self.pad(presented)).map { $0 ^ $1 })
    }

    /// The chain a token names: the first 16 bytes of a rotation's token, else (a first
    /// token, or any other text) the first 16 bytes of its SHA-256.
    static func chain(of token: String) -> [UInt8] {
        if token.utf8.count == 64, let bytes = Base64URL.decode(token), bytes.count == tokenBytes {
            return Array(bytes.prefix(chainBytes))
        }
        return Array(SHA256Digest.bytes(Array(token.utf8)).prefix(chainBytes))
    }

    /// What seals a successor: a SHA-256 of the presented token under its own prefix, so
    /// it is not the hash the database stores.
    private static func pad(_ token: String) -> [UInt8] {
        SHA256Digest.bytes(Array("ferry refresh successor\u{0}".utf8) + Array(token.utf8))
    }
}
