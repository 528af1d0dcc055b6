import FerryJSON

/// The value of the `"type"` member of one of Ferry's stream messages
/// (`{"type":"cue",…}`), read with FerryJSON's object reader, which stops at that member:
/// a load generator reads tens of thousands of them in a burst. Nil when the message is
/// not a JSON object with a string `type`.
public func messageType(ofJSON bytes: some Collection<UInt8>) -> String? {
    func read(_ buffer: UnsafeBufferPointer<UInt8>) -> String? {
        var type: String?
        _ = JSONObjectReader.forEachMember(in: buffer) { key, value in
            guard key.equals("type") else { return true }
            if case .string(let text) = value { type = text.decoded() }
            return false
        }
        return type
    }
    return bytes.withContiguousStorageIfAvailable(read) ?? Array(bytes).withUnsafeBufferPointer(read)
}
