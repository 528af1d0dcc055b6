/// An ordered list of HTTP header fields with case-insensitive lookup.
///
/// Fields keep the order and spelling they were added with; a name may repeat.
/// Lookups compare ASCII case-insensitively and scan linearly, which beats hashing
/// for the handful of fields a request carries.
public struct HTTPHeaders: Sendable, Sequence, ExpressibleByDictionaryLiteral {
    @usableFromInline var fields: [(name: String, value: String)]

    /// An empty list.
    public init() { fields = [] }

    /// Fields in the order written.
    public init(dictionaryLiteral elements: (String, String)...) {
        fields = elements.map { (name: $0.0, value: $0.1) }
    }

    /// The number of fields, repeated names counted once per occurrence.
    public var count: Int { fields.count }

    /// Whether there are no fields.
    public var isEmpty: Bool { fields.isEmpty }

    /// The first value of `name` (case-insensitive), or nil.
    public subscript(name: String) -> String? {
        for field in fields where field.name.equalsIgnoringASCIICase(name) { return field.value }
        return nil
    }

    /// Every value of `name` (case-insensitive), in order.
    public func values(for name: String) -> [String] {
        fields.filter { $0.name.equalsIgnoringASCIICase(name) }.map(\.value)
    }

    /// Whether any field is named `name` (case-insensitive).
    public func contains(_ name: String) -> Bool { self[name] != nil }

    /// Appends a field, keeping any earlier field of the same name.
    public mutating func add(name: String, value: String) {
        fields.append((name: name, value: value))
    }

    /// Replaces every field named `name` with one field holding `value`.
    public mutating func replaceOrAdd(name: String, value: String) {
        remove(name: name)
        add(name: name, value: value)
    }

    /// Removes every field named `name` (case-insensitive).
    public mutating func remove(name: String) {
        fields.removeAll { $0.name.equalsIgnoringASCIICase(name) }
    }

    /// Iterates the fields in order.
    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        fields.makeIterator()
    }

    mutating func reserveCapacity(_ count: Int) { fields.reserveCapacity(count) }
}

extension String {
    /// ASCII case-insensitive equality, without allocating (header names are ASCII tokens).
    func equalsIgnoringASCIICase(_ other: String) -> Bool {
        let fast = utf8.withContiguousStorageIfAvailable { lhs in
            other.utf8.withContiguousStorageIfAvailable { rhs in Self.equalsIgnoringASCIICase(lhs, rhs) }
        }
        if let fast, let result = fast { return result }
        return Self.equalsIgnoringASCIICase(Array(utf8), Array(other.utf8))
    }

    private static func equalsIgnoringASCIICase(
        _ lhs: some Collection<UInt8>, _ rhs: some Collection<UInt8>
    ) -> Bool {
        guard lhs.count == rhs.count else { return false }
        for (a, b) in zip(lhs, rhs) where a != b {
            // Setting bit 5 lowercases ASCII letters; check that the byte is a letter.
            let lowered = a | 0x20
            guard lowered == b | 0x20, lowered >= UInt8(ascii: "a"), lowered <= UInt8(ascii: "z") else {
                return false
            }
        }
        return true
    }
}

extension StringProtocol where UTF8View: BidirectionalCollection {
    /// The text without the spaces and tabs around it (a field value's optional
    /// whitespace, RFC 9110 §5.6.3).
    var trimmingASCIISpaces: String {
        let bytes = utf8
        guard let first = bytes.firstIndex(where: { $0 != 0x20 && $0 != 0x09 }),
            let last = bytes.lastIndex(where: { $0 != 0x20 && $0 != 0x09 })
        else { return "" }
        return String(self[first...last])
    }
}
