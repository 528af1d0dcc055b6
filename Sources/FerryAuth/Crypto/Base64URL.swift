/// Base64url without padding (RFC 4648 §5), as JWTs and refresh tokens spell bytes.
///
/// Hand-rolled rather than Foundation's base64 plus character swaps: decoding is on
/// the request path for every access token, and this reads from a borrowed buffer
/// into another without allocating, and rejects non-canonical input (padding, a
/// length of 4n+1, stray bits in the last character) that Foundation's would need
/// extra checks for.
public enum Base64URL {
    private static let alphabet: StaticString = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

    /// Each byte's 6-bit value, or 0xFF for a byte outside the alphabet.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for index in 0..<64 { table[Int(alphabet.utf8Start[index])] = UInt8(index) }
        return table
    }()

    /// Encodes `bytes` without padding.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        if let encoded = bytes.withContiguousStorageIfAvailable({ encode(UnsafeRawBufferPointer($0)) }) {
            return encoded
        }
        return Array(bytes).withUnsafeBytes { encode($0) }
    }

    /// Decodes unpadded base64url; nil for any byte outside the alphabet (including
    /// `=`), a length of 4n+1, or non-zero unused bits in the last character.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        if let decoded = text.utf8.withContiguousStorageIfAvailable({ decodeToArray($0) }) { return decoded }
        return Array(text.utf8).withUnsafeBufferPointer { decodeToArray($0) }
    }

    private static func decodeToArray(_ input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        guard let capacity = decodedCount(encodedCount: input.count) else { return nil }
        var valid = true
        let bytes = [UInt8](unsafeUninitializedCapacity: capacity) { output, count in
            count = decode(input, into: output) ?? 0
            valid = count == capacity
        }
        return valid ? bytes : nil
    }

    /// The number of characters that encode `count` bytes.
    static func encodedCount(byteCount count: Int) -> Int {
        (count * 8 + 5) / 6
    }

    /// The number of bytes that `count` characters decode to, or nil when no input
    /// has that length (4n+1).
    static func decodedCount(encodedCount count: Int) -> Int? {
        count % 4 == 1 ? nil : count * 6 / 8
    }

    /// Encodes `bytes` into a new string.
    static func encode(_ bytes: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: encodedCount(byteCount: bytes.count)) { output in
            encode(bytes, into: output)
        }
    }

    /// Encodes `bytes` into `output`, which must hold ``encodedCount(byteCount:)``
    /// bytes; returns that count.
    @discardableResult
    static func encode(_ bytes: UnsafeRawBufferPointer, into output: UnsafeMutableBufferPointer<UInt8>) -> Int {
        let table = alphabet.utf8Start
        var out = 0
        var index = 0
        while index + 3 <= bytes.count {
            let group = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            output[out] = table[Int(group >> 18)]
            output[out + 1] = table[Int(group >> 12 & 0x3F)]
            output[out + 2] = table[Int(group >> 6 & 0x3F)]
            output[out + 3] = table[Int(group & 0x3F)]
            index += 3
            out += 4
        }
        switch bytes.count - index {
        case 1:
            let group = UInt32(bytes[index]) << 16
            output[out] = table[Int(group >> 18)]
            output[out + 1] = table[Int(group >> 12 & 0x3F)]
            out += 2
        case 2:
            let group = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            output[out] = table[Int(group >> 18)]
            output[out + 1] = table[Int(group >> 12 & 0x3F)]
            output[out + 2] = table[Int(group >> 6 & 0x3F)]
            out += 3
        default:
            break
        }
        return out
    }

    /// Decodes `input` into `output` (at least ``decodedCount(encodedCount:)`` bytes)
    /// without allocating; returns the bytes written, or nil for input that is not
    /// canonical unpadded base64url.
    static func decode(_ input: UnsafeBufferPointer<UInt8>, into output: UnsafeMutableBufferPointer<UInt8>) -> Int? {
        guard let expected = decodedCount(encodedCount: input.count), output.count >= expected else { return nil }
        return values.withUnsafeBufferPointer { values -> Int? in
            var out = 0
            var index = 0
            while index + 4 <= input.count {
                let a = values[Int(input[index])]
                let b = values[Int(input[index + 1])]
                let c = values[Int(input[index + 2])]
                let d = values[Int(input[index + 3])]
                // 0xFF marks a byte outside the alphabet; OR-ing keeps the check to one branch.
                guard (a | b | c | d) & 0xC0 == 0 else { return nil }
                let group = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                output[out] = UInt8(truncatingIfNeeded: group >> 16)
                output[out + 1] = UInt8(truncatingIfNeeded: group >> 8)
                output[out + 2] = UInt8(truncatingIfNeeded: group)
                index += 4
                out += 3
            }
            switch input.count - index {
            case 2:
                let a = values[Int(input[index])]
                let b = values[Int(input[index + 1])]
                guard (a | b) & 0xC0 == 0, b & 0x0F == 0 else { return nil }
                output[out] = a << 2 | b >> 4
                out += 1
            case 3:
                let a = values[Int(input[index])]
                let b = values[Int(input[index + 1])]
                let c = values[Int(input[index + 2])]
                guard (a | b | c) & 0xC0 == 0, c & 0x03 == 0 else { return nil }
                output[out] = a << 2 | b >> 4
                output[out + 1] = b << 4 | c >> 2
                out += 2
            default:
                break
            }
            return out
        }
    }
}
