import Foundation

/// Refresh tokens: 256 random bits as 43 base64url characters. The client keeps
/// the token; the database keeps only its ``hash(_:)``.
public enum RefreshToken {
    /// A new token from `randombytes_buf`. Any thread; a microsecond or so.
    public static func generate() -> String {
        var bytes: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        return withUnsafeMutableBytes(of: &bytes) { buffer in
            Sodium.randomBytes(buffer)
            defer { buffer.initializeMemory(as: UInt8.self, repeating: 0) }
            return Base64URL.encode(UnsafeRawBufferPointer(buffer))
        }
    }

    /// The lowercase hex SHA-256 of `token`'s UTF-8: what the database stores and
    /// looks a presented token up by. A presented token is hashed as sent; one that
    /// was never issued simply finds nothing.
    public static func hash(_ token: String) -> String {
        SHA256Digest.hex(Array(token.utf8))
    }
}
