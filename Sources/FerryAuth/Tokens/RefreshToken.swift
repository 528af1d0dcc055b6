import Foundation

/// Refresh tokens: 256 random bits as 43 base64url characters. The client keeps
/// the token; the database keeps only its ``hash(_:)``.
///
/// A token issued on shard N > 0 is sent as `N.<token>` (``issued(_:shard:)``), the
/// shard in decimal, so that haproxy routes a refresh to its shard by that prefix; shard
/// 0 sends the token bare, as before sharding. The prefix only routes: the database
/// knows the token by the hash of what follows it (``body(of:)``), so a forged prefix
/// reaches a shard that has no such hash and refuses the token.
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
    /// looks a presented token up by. A presented token is hashed as sent, without
    /// its shard prefix (``body(of:)``); one that was never issued simply finds nothing.
    public static func hash(_ token: String) -> String {
        SHA256Digest.hex(Array(token.utf8))
    }

    /// `token` as sent to a user of `shard`: `<shard>.<token>`, or `token` on shard 0.
    public static func issued(_ token: String, shard: Int) -> String {
        shard == 0 ? token : "\(shard).\(token)"
    }

    /// A presented token without its shard prefix: the text after a leading `N.` where N
    /// is a shard number from 1 to ``Shard/maximum`` in decimal without leading zeros,
    /// else the whole text. base64url has no `.`, so no bare token has such a prefix.
    public static func body(of presented: String) -> String {
        let number = presented.utf8.prefix { $0 != UInt8(ascii: ".") }
        guard number.count < presented.utf8.count, (1...5).contains(number.count), number.first != UInt8(ascii: "0"),
            number.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let shard = Int(Substring(number)), shard <= Shard.maximum
        else { return presented }
        return String(Substring(presented.utf8.dropFirst(number.count + 1)))
    }
}
