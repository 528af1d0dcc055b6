/// JSON string literals written straight into a byte buffer: for small, hot bodies
/// where `JSONEncoder` would cost more than the rest of the request.
public enum JSONString {
    /// Appends `string` as a quoted JSON string, escaping what RFC 8259 requires.
    public static func append(_ string: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): bytes.append(contentsOf: #"\\"#.utf8)
            case UInt8(ascii: "\n"): bytes.append(contentsOf: #"\n"#.utf8)
            case UInt8(ascii: "\r"): bytes.append(contentsOf: #"\r"#.utf8)
            case UInt8(ascii: "\t"): bytes.append(contentsOf: #"\t"#.utf8)
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: #"\u00"#.utf8)
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0xF)])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}

extension [UInt8] {
    /// Appends `value` in decimal ASCII, left-padded with zeros to `minimumDigits`.
    public mutating func appendDecimal(_ value: Int, minimumDigits: Int = 1) {
        if value < 0 { append(UInt8(ascii: "-")) }
        let magnitude = value.magnitude
        var digits = 1
        var divisor: UInt = 1
        while divisor <= magnitude / 10 {
            divisor *= 10
            digits += 1
        }
        for _ in digits..<Swift.max(digits, minimumDigits) { append(UInt8(ascii: "0")) }
        while divisor > 0 {
            append(UInt8(ascii: "0") + UInt8(magnitude / divisor % 10))
            divisor /= 10
        }
    }
}
