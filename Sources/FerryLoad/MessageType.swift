/// The value of the `"type"` member of one of Ferry's stream messages
/// (`{"type":"cue",…}`), found without parsing the whole JSON: a load generator reads
/// tens of thousands of them in a burst. Assumes what PROTOCOL.md promises: the
/// message is an object whose `"type"` member is a plain string, and no member
/// before it holds the text `"type"` itself.
public func messageType(ofJSON bytes: some Collection<UInt8>) -> String? {
    let key = Array("\"type\"".utf8)
    let array = Array(bytes)
    guard array.count > key.count else { return nil }
    var index = 0
    search: while index + key.count <= array.count {
        for offset in 0..<key.count where array[index + offset] != key[offset] {
            index += 1
            continue search
        }
        var cursor = index + key.count
        func skipSpaces() {
            while cursor < array.count,
                array[cursor] == 32 || array[cursor] == 9 || array[cursor] == 10 || array[cursor] == 13
            {
                cursor += 1
            }
        }
        skipSpaces()
        guard cursor < array.count, array[cursor] == UInt8(ascii: ":") else {
            index += 1
            continue
        }
        cursor += 1
        skipSpaces()
        guard cursor < array.count, array[cursor] == UInt8(ascii: "\"") else { return nil }
        let valueStart = cursor + 1
        guard let valueEnd = array[valueStart...].firstIndex(of: UInt8(ascii: "\"")) else { return nil }
        return String(decoding: array[valueStart..<valueEnd], as: UTF8.self)
    }
    return nil
}
