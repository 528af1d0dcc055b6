import Foundation

/// A JSON value: what a row's column holds on the wire and what ``FerryRow`` is made of.
///
/// Integers stay integers (`.integer`), so ids and counters round-trip exactly; a number
/// with a fraction or beyond 64 bits is `.double`.
public enum JSONValue: Sendable, Hashable, Codable, CustomStringConvertible {
    /// `null` (and SQL's NULL).
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number without a fraction that fits in 64 bits.
    case integer(Int64)
    /// Any other number.
    case double(Double)
    /// A string.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object (a row is one).
    case object([String: JSONValue])

    /// Reads any JSON value (integers as ``integer(_:)``, other numbers as ``double(_:)``).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let bool = try? container.decode(Bool.self) {
            self = .bool(bool)
        } else if let integer = try? container.decode(Int64.self) {
            self = .integer(integer)
        } else if let double = try? container.decode(Double.self) {
            self = .double(double)
        } else if let string = try? container.decode(String.self) {
            self = .string(string)
        } else if let array = try? container.decode([JSONValue].self) {
            self = .array(array)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// Writes the value as the JSON it is.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let bool): try container.encode(bool)
        case .integer(let integer): try container.encode(integer)
        case .double(let double): try container.encode(double)
        case .string(let string): try container.encode(string)
        case .array(let array): try container.encode(array)
        case .object(let object): try container.encode(object)
        }
    }

    /// Parses one JSON value from `data` (RFC 8259; at most 256 arrays and objects deep).
    public init(json data: Data) throws(JSONParseError) {
        let parsed = data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) in
            Result { () throws(JSONParseError) in
                var parser = JSONParser(bytes: bytes.bindMemory(to: UInt8.self))
                return try parser.document()
            }
        }
        self = try parsed.get()
    }

    /// This value as compact JSON text, keys sorted (so equal values give equal text).
    public var jsonText: String {
        var text = ""
        write(to: &text)
        return text
    }

    private func write(to text: inout String) {
        switch self {
        case .null: text += "null"
        case .bool(let bool): text += bool ? "true" : "false"
        case .integer(let integer): text += String(integer)
        // Non-finite doubles have no JSON form (no parse produces them).
        case .double(let double): text += double.isFinite ? "\(double)" : "null"
        case .string(let string): Self.writeString(string, to: &text)
        case .array(let array):
            text += "["
            for (index, element) in array.enumerated() {
                if index > 0 { text += "," }
                element.write(to: &text)
            }
            text += "]"
        case .object(let object):
            text += "{"
            for (index, key) in object.keys.sorted().enumerated() {
                if index > 0 { text += "," }
                Self.writeString(key, to: &text)
                text += ":"
                object[key]!.write(to: &text)
            }
            text += "}"
        }
    }

    private static func writeString(_ string: String, to text: inout String) {
        text += "\""
        // Most strings need no escape: appended whole, not scalar by scalar.
        if !string.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            text += string
            text += "\""
            return
        }
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            case _ where scalar.value < 0x20:
                text += "\\u00" + (scalar.value < 0x10 ? "0" : "") + String(scalar.value, radix: 16)
            default: text.unicodeScalars.append(scalar)
            }
        }
        text += "\""
    }

    /// The value as compact JSON text (``jsonText``).
    public var description: String { jsonText }

    /// The string, when this is one.
    public var stringValue: String? { if case .string(let string) = self { string } else { nil } }
    /// The integer, when this is one (or a double with no fraction in range).
    public var integerValue: Int64? {
        switch self {
        case .integer(let integer): integer
        case .double(let double) where double.rounded() == double && abs(double) < 9.2e18: Int64(double)
        default: nil
        }
    }
    /// The object's members, when this is one.
    public var objectValue: [String: JSONValue]? { if case .object(let object) = self { object } else { nil } }
    /// The array's elements, when this is one.
    public var arrayValue: [JSONValue]? { if case .array(let array) = self { array } else { nil } }
    /// The member `key` of an object (nil for anything else or a missing member).
    public subscript(key: String) -> JSONValue? { objectValue?[key] }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByNilLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    /// `"text"` as ``string(_:)``.
    public init(stringLiteral value: String) { self = .string(value) }
    /// `42` as ``integer(_:)``.
    public init(integerLiteral value: Int64) { self = .integer(value) }
    /// `1.5` as ``double(_:)``.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// `true` as ``bool(_:)``.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// `nil` as ``null``.
    public init(nilLiteral: ()) { self = .null }
    /// `[…]` as ``array(_:)``.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// `[key: value, …]` as ``object(_:)``.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

/// A row: column name → value, as push sends it and pull returns it.
public typealias FerryRow = [String: JSONValue]

extension JSONValue {
    /// `value` encoded with `JSONEncoder` and read back as a JSON value (for an app's
    /// `Encodable` row types).
    static func encoding(_ value: some Encodable) throws -> JSONValue {
        if let value = value as? JSONValue { return value }
        if let row = value as? FerryRow { return .object(row) }
        return try JSONValue(json: JSONEncoder().encode(value))
    }

    /// This value decoded into `type` with `JSONDecoder`.
    func decoded<T: Decodable>(as type: T.Type) throws -> T {
        try JSONDecoder().decode(type, from: Data(jsonText.utf8))
    }
}

/// Why a JSON text did not parse: the byte offset where it stopped.
public struct JSONParseError: Error, Sendable, CustomStringConvertible {
    /// The offset of the offending byte.
    public let offset: Int
    /// A description for logs: where parsing stopped.
    public var description: String { "invalid JSON at byte \(offset)" }
}

/// A small JSON reader that keeps integers exact (Foundation's parsers turn every number
/// into a Double or an NSNumber whose boolean-ness Linux cannot tell apart).
private struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    var depth = 0

    mutating func document() throws(JSONParseError) -> JSONValue {
        let value = try parseValue()
        skipSpace()
        guard index == bytes.count else { throw JSONParseError(offset: index) }
        return value
    }

    private mutating func skipSpace() {
        while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
    }

    private mutating func expect(_ literal: StaticString, _ value: JSONValue) throws(JSONParseError) -> JSONValue {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw JSONParseError(offset: index) }
        for offset in 0..<count where bytes[index + offset] != literal.utf8Start[offset] {
            throw JSONParseError(offset: index + offset)
        }
        index += count
        return value
    }

    private mutating func parseValue() throws(JSONParseError) -> JSONValue {
        skipSpace()
        guard index < bytes.count else { throw JSONParseError(offset: index) }
        switch bytes[index] {
        case UInt8(ascii: "n"): return try expect("null", .null)
        case UInt8(ascii: "t"): return try expect("true", .bool(true))
        case UInt8(ascii: "f"): return try expect("false", .bool(false))
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "["):
            depth += 1
            guard depth <= 256 else { throw JSONParseError(offset: index) }
            defer { depth -= 1 }
            index += 1
            var elements: [JSONValue] = []
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            while true {
                elements.append(try parseValue())
                skipSpace()
                guard index < bytes.count else { throw JSONParseError(offset: index) }
                let byte = bytes[index]
                index += 1
                if byte == UInt8(ascii: "]") { return .array(elements) }
                guard byte == UInt8(ascii: ",") else { throw JSONParseError(offset: index - 1) }
            }
        case UInt8(ascii: "{"):
            depth += 1
            guard depth <= 256 else { throw JSONParseError(offset: index) }
            defer { depth -= 1 }
            index += 1
            var members: [String: JSONValue] = [:]
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                    throw JSONParseError(offset: index)
                }
                let key = try parseString()
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
                    throw JSONParseError(offset: index)
                }
                index += 1
                members[key] = try parseValue()
                skipSpace()
                guard index < bytes.count else { throw JSONParseError(offset: index) }
                let byte = bytes[index]
                index += 1
                if byte == UInt8(ascii: "}") { return .object(members) }
                guard byte == UInt8(ascii: ",") else { throw JSONParseError(offset: index - 1) }
            }
        default: return try parseNumber()
        }
    }

    private mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        let digitsStart = index
        while index < bytes.count {
            let byte = bytes[index]
            if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
                index += 1
            } else if byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E")
                || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-")
            {
                isInteger = false
                index += 1
            } else {
                break
            }
        }
        guard index > digitsStart else { throw JSONParseError(offset: start) }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger, let integer = Int64(text) { return .integer(integer) }
        guard let double = Double(text), double.isFinite else { throw JSONParseError(offset: start) }
        return .double(double)
    }

    private mutating func parseString() throws(JSONParseError) -> String {
        index += 1  // the opening quote
        let start = index
        // The common case: no escapes, so the bytes are the string.
        while index < bytes.count, bytes[index] != UInt8(ascii: "\""), bytes[index] != UInt8(ascii: "\\") {
            guard bytes[index] >= 0x20 else { throw JSONParseError(offset: index) }
            index += 1
        }
        guard index < bytes.count else { throw JSONParseError(offset: index) }
        var utf8 = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while true {
            guard index < bytes.count else { throw JSONParseError(offset: index) }
            let byte = bytes[index]
            index += 1
            if byte == UInt8(ascii: "\"") { break }
            guard byte >= 0x20 else { throw JSONParseError(offset: index - 1) }
            guard byte == UInt8(ascii: "\\") else {
                utf8.append(byte)
                continue
            }
            guard index < bytes.count else { throw JSONParseError(offset: index) }
            let escape = bytes[index]
            index += 1
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escape)
            case UInt8(ascii: "b"): utf8.append(0x08)
            case UInt8(ascii: "f"): utf8.append(0x0C)
            case UInt8(ascii: "n"): utf8.append(0x0A)
            case UInt8(ascii: "r"): utf8.append(0x0D)
            case UInt8(ascii: "t"): utf8.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800..<0xDC00).contains(scalar), index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                    bytes[index + 1] == UInt8(ascii: "u")
                {
                    index += 2
                    let low = try hex4()
                    guard (0xDC00..<0xE000).contains(low) else { throw JSONParseError(offset: index) }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw JSONParseError(offset: index) }
                utf8.append(contentsOf: Array(String(Character(unicode)).utf8))
            default: throw JSONParseError(offset: index - 1)
            }
        }
        return String(decoding: utf8, as: UTF8.self)
    }

    private mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw JSONParseError(offset: index) }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw JSONParseError(offset: index)
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }
}
