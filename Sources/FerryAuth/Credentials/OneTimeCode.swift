/// One-time codes a person types from a mail (a password reset, an email confirmation):
/// ``length`` characters from ``alphabet``, 32 letters and digits without the ones read
/// as each other (`0`/`O`, `1`/`I`), so 40 random bits. The database keeps only a code's
/// ``hash(_:)``; what a person types is read by ``normalize(_:)`` first.
public enum OneTimeCode {
    /// Upper-case letters and digits, none that looks like another.
    public static let alphabet = Array("ABCDEFGHJKLMNPQRSTUVWXYZ23456789".utf8)
    /// Characters in a code.
    public static let length = 8

    /// A new code from `randombytes_buf`: each byte's low 5 bits pick a character (32
    /// divides 256, so every character is equally likely). Any thread.
    public static func generate() -> String {
        var random: UInt64 = 0
        withUnsafeMutableBytes(of: &random) { Sodium.randomBytes($0) }
        defer { random = 0 }
        let characters = withUnsafeBytes(of: random) { bytes in bytes.prefix(length).map { alphabet[Int($0 & 31)] } }
        return String(decoding: characters, as: UTF8.self)
    }

    /// `typed` as it is compared: spaces and hyphens dropped, letters upper-cased (a
    /// person may write `k7p2-qx9m`). Nil when what is left is not ``length`` characters
    /// of the alphabet (the answer is `invalid_code` without a database round trip).
    public static func normalize(_ typed: String) -> String? {
        let kept = typed.utf8.filter { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "-") }.map { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) ? byte - 32 : byte
        }
        guard kept.count == length, kept.allSatisfy(alphabet.contains) else { return nil }
        return String(decoding: kept, as: UTF8.self)
    }

    /// The lowercase hex SHA-256 of a normalised code: what the database stores.
    public static func hash(_ code: String) -> String {
        SHA256Digest.hex(Array(code.utf8))
    }
}
