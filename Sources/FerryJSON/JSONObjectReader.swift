import Foundation

/// Reads the members of one JSON object from borrowed bytes without building a
/// tree: the access-token header and claims, on the request path; and checks a whole
/// request body before anything else reads it (``defect(in:maximumDepth:)``).
///
/// Strict: whitespace only where RFC 8259 allows it, nothing after the object,
/// control characters and bad escapes in strings rejected, lone surrogates
/// rejected, strings well-formed UTF-8 (RFC 3629: no overlong forms, no encoded
/// surrogates). Nested arrays and objects are validated and skipped (at most 16
/// deep for ``forEachMember(in:_:)``). `JSONDecoder` takes about 3.6 µs to decode a
/// token's claims, more than a whole access-token verify (FerryAuth) with this
/// reader, and cannot see a duplicated `alg`; this allocates only the strings a
/// caller decodes. Any thread; the bytes must outlive the call.
public struct JSONObjectReader {
    /// A string as it appears between its quotes, decoded only on demand.
    public struct RawString {
        /// The bytes between the quotes, escapes not yet applied.
        public let bytes: UnsafeBufferPointer<UInt8>
        /// Whether the bytes contain a backslash escape.
        public let hasEscapes: Bool

        /// Whether the string equals `literal` (ASCII), compared without allocating
        /// unless the string has escapes.
        public func equals(_ literal: StaticString) -> Bool {
            if hasEscapes { return decoded().map { $0 == literal.description } ?? false }
            guard bytes.count == literal.utf8CodeUnitCount else { return false }
            return bytes.count == 0 || memcmp(bytes.baseAddress!, literal.utf8Start, bytes.count) == 0
        }

        /// The string with escapes applied, or nil when it is not valid UTF-8.
        public func decoded() -> String? {
            guard hasEscapes else { return String(validating: bytes, as: UTF8.self) }
            var output: [UInt8] = []
            output.reserveCapacity(bytes.count)
            var index = 0
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                guard byte == UInt8(ascii: "\\") else {
                    output.append(byte)
                    continue
                }
                // The reader validated every escape, so each one here is complete.
                let kind = bytes[index]
                index += 1
                switch kind {
                case UInt8(ascii: "b"): output.append(0x08)
                case UInt8(ascii: "f"): output.append(0x0C)
                case UInt8(ascii: "n"): output.append(0x0A)
                case UInt8(ascii: "r"): output.append(0x0D)
                case UInt8(ascii: "t"): output.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = UInt32(JSONObjectReader.hex4(bytes, at: index)!)
                    index += 4
                    if (0xD800..<0xDC00).contains(scalar) {
                        let low = UInt32(JSONObjectReader.hex4(bytes, at: index + 2)!)
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        index += 6
                    }
                    output.append(contentsOf: Unicode.UTF8.encode(Unicode.Scalar(scalar)!)!)
                default: output.append(kind)
                }
            }
            return String(validating: output, as: UTF8.self)
        }
    }

    /// A member's value.
    public enum Value {
        /// A string, escapes not yet applied.
        case string(RawString)
        /// A number with no fraction or exponent that fits in `Int`.
        case integer(Int)
        /// `true` or `false`.
        case bool(Bool)
        /// `null`.
        case null
        /// Any other valid value: a fractional or huge number, an array, an object.
        case other
    }

    /// Why bytes are not an acceptable JSON document.
    public enum Defect: Equatable, Sendable {
        /// A string holds bytes that are not well-formed UTF-8.
        case notUTF8
        /// Arrays and objects nest deeper than the limit.
        case tooDeep
        /// Anything else RFC 8259 does not allow.
        case notJSON
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private let maximumDepth: Int
    private var index = 0
    /// Set where a read fails for a reason other than the grammar.
    private var defect: Defect?

    private init(_ bytes: UnsafeBufferPointer<UInt8>, maximumDepth: Int = 16) {
        self.bytes = bytes
        self.maximumDepth = maximumDepth
    }

    /// Nil when `bytes` are exactly one JSON value (whitespace around it allowed), in
    /// UTF-8, with at most `maximumDepth` arrays and objects open at once (the
    /// outermost counts); else what is wrong. One pass, no allocation; recursion as
    /// deep as the nesting, so `maximumDepth` also bounds the stack.
    public static func defect(in bytes: UnsafeBufferPointer<UInt8>, maximumDepth: Int) -> Defect? {
        var reader = JSONObjectReader(bytes, maximumDepth: maximumDepth)
        reader.skipWhitespace()
        guard reader.readValue(depth: 0) != nil else { return reader.defect ?? .notJSON }
        reader.skipWhitespace()
        return reader.index == bytes.count ? nil : .notJSON
    }

    /// Calls `body` with each member of the object that is all of `bytes`, in order;
    /// false when the bytes are not exactly one valid JSON object or when `body`
    /// returns false (which stops the reading).
    public static func forEachMember(
        in bytes: UnsafeBufferPointer<UInt8>, _ body: (_ key: RawString, _ value: Value) -> Bool
    ) -> Bool {
        var reader = JSONObjectReader(bytes)
        reader.skipWhitespace()
        guard reader.consume(UInt8(ascii: "{")) else { return false }
        reader.skipWhitespace()
        if !reader.consume(UInt8(ascii: "}")) {
            while true {
                reader.skipWhitespace()
                guard let key = reader.readString() else { return false }
                reader.skipWhitespace()
                guard reader.consume(UInt8(ascii: ":")) else { return false }
                reader.skipWhitespace()
                guard let value = reader.readValue(depth: 0), body(key, value) else { return false }
                reader.skipWhitespace()
                if reader.consume(UInt8(ascii: ",")) { continue }
                guard reader.consume(UInt8(ascii: "}")) else { return false }
                break
            }
        }
        reader.skipWhitespace()
        return reader.index == bytes.count
    }

    // MARK: - Reading

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func consume(_ byte: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    private mutating func consume(_ literal: StaticString) -> Bool {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - index >= count, memcmp(bytes.baseAddress! + index, literal.utf8Start, count) == 0 else {
            return false
        }
        index += count
        return true
    }

    private mutating func readValue(depth: Int) -> Value? {
        guard index < bytes.count else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "\""): return readString().map { .string($0) }
        case UInt8(ascii: "t"): return consume("true") ? .bool(true) : nil
        case UInt8(ascii: "f"): return consume("false") ? .bool(false) : nil
        case UInt8(ascii: "n"): return consume("null") ? .null : nil
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return readNumber()
        case UInt8(ascii: "["), UInt8(ascii: "{"): return skipContainer(depth: depth + 1) ? .other : nil
        default: return nil
        }
    }

    /// Reads a string starting at its opening quote.
    private mutating func readString() -> RawString? {
        guard consume(UInt8(ascii: "\"")) else { return nil }
        let start = index
        var hasEscapes = false
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                let raw = RawString(
                    bytes: UnsafeBufferPointer(rebasing: bytes[start..<index]), hasEscapes: hasEscapes)
                index += 1
                return raw
            case UInt8(ascii: "\\"):
                hasEscapes = true
                guard skipEscape() else { return nil }
            case 0..<0x20:
                return nil
            case 0x80...:
                guard let length = Self.utf8SequenceLength(bytes, at: index) else {
                    defect = .notUTF8
                    return nil
                }
                index += length
            default:
                index += 1
            }
        }
        return nil
    }

    /// The length of the well-formed UTF-8 sequence (RFC 3629 §4) whose lead byte, at
    /// least 0x80, is at `offset`; nil for a stray continuation byte, an overlong form,
    /// an encoded surrogate, a scalar above U+10FFFF or a sequence cut short.
    private static func utf8SequenceLength(_ bytes: UnsafeBufferPointer<UInt8>, at offset: Int) -> Int? {
        // The second byte's range depends on the lead byte; later ones are 0x80...0xBF.
        let length: Int
        var second: ClosedRange<UInt8> = 0x80...0xBF
        switch bytes[offset] {
        case 0xC2...0xDF: length = 2
        case 0xE0: (length, second) = (3, 0xA0...0xBF)
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: (length, second) = (3, 0x80...0x9F)
        case 0xF0: (length, second) = (4, 0x90...0xBF)
        case 0xF1...0xF3: length = 4
        case 0xF4: (length, second) = (4, 0x80...0x8F)
        default: return nil
        }
        guard bytes.count - offset >= length, second.contains(bytes[offset + 1]) else { return nil }
        for continuation in bytes[offset + 2..<offset + length] where continuation & 0xC0 != 0x80 { return nil }
        return length
    }

    /// Validates one escape starting at its backslash, including a surrogate pair's
    /// second half.
    private mutating func skipEscape() -> Bool {
        guard index + 1 < bytes.count else { return false }
        switch bytes[index + 1] {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
            UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            index += 2
            return true
        case UInt8(ascii: "u"):
            guard let unit = Self.hex4(bytes, at: index + 2) else { return false }
            index += 6
            switch unit {
            case 0xD800..<0xDC00:
                guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                    bytes[index + 1] == UInt8(ascii: "u"),
                    let low = Self.hex4(bytes, at: index + 2), (0xDC00..<0xE000).contains(low)
                else { return false }
                index += 6
                return true
            case 0xDC00..<0xE000:
                return false
            default:
                return true
            }
        default:
            return false
        }
    }

    /// The value of four hex digits at `offset`, or nil.
    static func hex4(_ bytes: UnsafeBufferPointer<UInt8>, at offset: Int) -> UInt16? {
        guard offset >= 0, offset + 4 <= bytes.count else { return nil }
        var value: UInt16 = 0
        for byte in bytes[offset..<offset + 4] {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt16(digit)
        }
        return value
    }

    /// Reads a number per RFC 8259's grammar; `.integer` when it has neither
    /// fraction nor exponent and fits.
    private mutating func readNumber() -> Value? {
        let negative = consume(UInt8(ascii: "-"))
        guard index < bytes.count, isDigit(bytes[index]) else { return nil }
        var magnitude: UInt64 = 0
        var overflow = false
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            while index < bytes.count, isDigit(bytes[index]) {
                let (times, o1) = magnitude.multipliedReportingOverflow(by: 10)
                let (plus, o2) = times.addingReportingOverflow(UInt64(bytes[index] - UInt8(ascii: "0")))
                overflow = overflow || o1 || o2
                magnitude = plus
                index += 1
            }
        }
        var isInteger = true
        if consume(UInt8(ascii: ".")) {
            guard skipDigits() else { return nil }
            isInteger = false
        }
        if index < bytes.count, bytes[index] | 0x20 == UInt8(ascii: "e") {
            index += 1
            if !consume(UInt8(ascii: "+")) { _ = consume(UInt8(ascii: "-")) }
            guard skipDigits() else { return nil }
            isInteger = false
        }
        guard isInteger, !overflow else { return .other }
        if negative {
            guard magnitude <= UInt64(Int.max) + 1 else { return .other }
            return .integer(Int(truncatingIfNeeded: 0 &- magnitude))
        }
        guard magnitude <= UInt64(Int.max) else { return .other }
        return .integer(Int(magnitude))
    }

    private func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    /// Skips one or more digits; false when there is none.
    private mutating func skipDigits() -> Bool {
        let start = index
        while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        return index > start
    }

    /// Validates and skips an array or object starting at its opening bracket.
    private mutating func skipContainer(depth: Int) -> Bool {
        guard depth <= maximumDepth else {
            defect = .tooDeep
            return false
        }
        let isObject = bytes[index] == UInt8(ascii: "{")
        let close = isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")
        index += 1
        skipWhitespace()
        if consume(close) { return true }
        while true {
            skipWhitespace()
            if isObject {
                guard readString() != nil else { return false }
                skipWhitespace()
                guard consume(UInt8(ascii: ":")) else { return false }
                skipWhitespace()
            }
            guard readValue(depth: depth) != nil else { return false }
            skipWhitespace()
            if consume(UInt8(ascii: ",")) { continue }
            return consume(close)
        }
    }
}
