import Foundation

/// Decodes a wire type from a ``JSONValue`` the client's own parser already read.
///
/// `JSONDecoder` would parse the bytes again and, for every column of every pulled row,
/// try each JSON type in turn; here a ``JSONValue`` wanted as such (a row's values) is
/// handed over as it is, so a pull page of a thousand rows costs what reading it did.
struct WireDecoder {
    /// `T` from `value`; a `DecodingError` names the field that did not fit.
    static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        if let value = value as? T { return value }
        return try T(from: ValueDecoder(value: value, codingPath: []))
    }

    /// The value `decoder` reads, when it is this decoder's: a wire type with many rows
    /// takes them as they are instead of one container call per column.
    static func value(of decoder: any Decoder) -> JSONValue? { (decoder as? ValueDecoder)?.value }
}

private struct ValueDecoder: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let object) = value else { throw mismatch([String: JSONValue].self) }
        return KeyedDecodingContainer(KeyedValues(object: object, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let array) = value else { throw mismatch([JSONValue].self) }
        return UnkeyedValues(array: array, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { SingleValue(decoder: self) }

    func mismatch(_ type: Any.Type) -> DecodingError {
        .typeMismatch(type, .init(codingPath: codingPath, debugDescription: "found \(value.jsonText.prefix(80))"))
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        if let value = value as? T { return value }
        switch (type, value) {
        case (is String.Type, .string(let string)): return string as! T
        case (is Bool.Type, .bool(let bool)): return bool as! T
        case (is Int64.Type, .integer(let integer)): return integer as! T
        case (is Int.Type, .integer(let integer)): return Int(integer) as! T
        case (is Double.Type, .integer(let integer)): return Double(integer) as! T
        case (is Double.Type, .double(let double)): return double as! T
        default: break
        }
        if [String.self, Bool.self, Int64.self, Int.self, Double.self].contains(where: { $0 == type }) {
            throw mismatch(type)
        }
        return try T(from: self)
    }
}

private struct SingleValue: SingleValueDecodingContainer {
    let decoder: ValueDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }
    func decodeNil() -> Bool { decoder.value == .null }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decode(type) }
}

private struct KeyedValues<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let object: [String: JSONValue]
    let codingPath: [any CodingKey]
    var allKeys: [Key] { object.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { object[key.stringValue] != nil }

    func decodeNil(forKey key: Key) throws -> Bool { (object[key.stringValue] ?? .null) == .null }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        guard let value = object[key.stringValue] else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "missing"))
        }
        return try ValueDecoder(value: value, codingPath: codingPath + [key]).decode(type)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try ValueDecoder(value: object[key.stringValue] ?? .null, codingPath: codingPath + [key]).container(
            keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ValueDecoder(value: object[key.stringValue] ?? .null, codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { ValueDecoder(value: .object(object), codingPath: codingPath) }
    func superDecoder(forKey key: Key) throws -> any Decoder {
        ValueDecoder(value: object[key.stringValue] ?? .null, codingPath: codingPath + [key])
    }
}

private struct UnkeyedValues: UnkeyedDecodingContainer {
    let array: [JSONValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0
    var count: Int? { array.count }
    var isAtEnd: Bool { currentIndex >= array.count }

    init(array: [JSONValue], codingPath: [any CodingKey]) {
        self.array = array
        self.codingPath = codingPath
    }

    private struct Index: CodingKey {
        var intValue: Int?
        var stringValue: String { "\(intValue ?? 0)" }
        init(intValue: Int) { self.intValue = intValue }
        init?(stringValue: String) { nil }
    }

    private mutating func next() throws -> ValueDecoder {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                JSONValue.self, .init(codingPath: codingPath, debugDescription: "the array ended"))
        }
        defer { currentIndex += 1 }
        return ValueDecoder(value: array[currentIndex], codingPath: codingPath + [Index(intValue: currentIndex)])
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, array[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decode(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
        -> KeyedDecodingContainer<NestedKey>
    { try next().container(keyedBy: type) }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }

    mutating func superDecoder() throws -> any Decoder { try next() }
}
