import CCrypto
import Foundation

/// SHA-256 as lowercase hex: migration checksums and the refresh-token hashes the
/// database stores.
public enum SHA256Digest {
    /// The lowercase hex SHA-256 of `bytes` (64 characters). Any thread; well under
    /// a microsecond for a short input.
    public static func hex(_ bytes: some ContiguousBytes) -> String {
        var digest: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        return withUnsafeMutableBytes(of: &digest) { digest in
            bytes.withUnsafeBytes { input in
                _ = SHA256(
                    input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count,
                    digest.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
            return hexString(UnsafeRawBufferPointer(digest))
        }
    }

    /// The 32 bytes of the SHA-256 of `bytes`. Any thread.
    public static func bytes(_ bytes: some ContiguousBytes) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: 32) { output, count in
            bytes.withUnsafeBytes { input in
                _ = SHA256(input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count, output.baseAddress!)
            }
            count = 32
        }
    }

    /// The lowercase hex of `bytes`, two characters a byte.
    static func hexString(_ bytes: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { output in
            let digits: StaticString = "0123456789abcdef"
            let table = digits.utf8Start
            for (index, byte) in bytes.enumerated() {
                output[2 * index] = table[Int(byte >> 4)]
                output[2 * index + 1] = table[Int(byte & 0xF)]
            }
            return bytes.count * 2
        }
    }
}
