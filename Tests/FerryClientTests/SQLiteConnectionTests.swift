import FerryTestSupport
import Foundation
import Testing

@testable import FerryClient

/// A fresh SQLite file for one test, removed afterwards.
func withTemporaryDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-client-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    return try await body(directory)
}

@Suite(.tagSelection) struct SQLiteConnectionTests {
    @Test func opensInWALMode() async throws {
        try await withTemporaryDirectory { (directory) async throws -> Void in
            let connection = try SQLiteConnection(path: directory.appendingPathComponent("a.sqlite").path)
            #expect(try connection.query("pragma journal_mode") == [[.text("wal")]])
        }
    }

    @Test func aTransactionThatThrowsLeavesNothing() async throws {
        try await withTemporaryDirectory { (directory) async throws -> Void in
            let connection = try SQLiteConnection(path: directory.appendingPathComponent("a.sqlite").path)
            try connection.execute("create table t (x integer)")
            struct Stop: Error {}
            #expect(throws: Stop.self) {
                try connection.transaction {
                    try connection.query("insert into t values (?1)", [.integer(1)])
                    throw Stop()
                }
            }
            #expect(try connection.query("select count(*) from t") == [[.integer(0)]])
        }
    }

    @Test func aTransactionReportsTheTablesItChangedOnce() async throws {
        try await withTemporaryDirectory { (directory) async throws -> Void in
            let connection = try SQLiteConnection(path: directory.appendingPathComponent("a.sqlite").path)
            try connection.execute("create table t (x integer); create table u (y text)")
            let (_, changed) = try connection.transaction {
                for value in 0..<100 { try connection.query("insert into t values (?1)", [.integer(Int64(value))]) }
                try connection.query("insert into u values (?1)", [.text("a")])
            }
            #expect(changed == ["t", "u"])
            let (_, none) = try connection.transaction { try connection.query("select * from t") }
            #expect(none.isEmpty)
        }
    }

    @Test func valuesRoundTripWithTheirTypes() async throws {
        try await withTemporaryDirectory { (directory) async throws -> Void in
            let connection = try SQLiteConnection(path: directory.appendingPathComponent("a.sqlite").path)
            try connection.execute("create table t (a, b, c, d, e)")
            let values: [SQLValue] = [
                .integer(Int64.max), .real(0.5), .text("ünïcode \"quoted\""), .blob(Data([0, 1, 2])), .null,
            ]
            try connection.query("insert into t values (?1, ?2, ?3, ?4, ?5)", values)
            #expect(try connection.query("select * from t") == [values])
        }
    }
}

@Suite(.tagSelection) struct JSONValueTests {
    @Test func integersStayExact() throws {
        let value = try JSONValue(json: Data(#"{"big": 9007199254740993, "small": -3, "real": 1.5}"#.utf8))
        #expect(value["big"] == .integer(9_007_199_254_740_993))
        #expect(value["small"] == .integer(-3))
        #expect(value["real"] == .double(1.5))
    }

    @Test func escapesAndSurrogatePairsDecode() throws {
        let value = try JSONValue(json: Data(#"["a\"b\\c\n", "\u00e9\ud83d\ude00"]"#.utf8))
        #expect(value == .array([.string("a\"b\\c\n"), .string("é😀")]))
    }

    @Test func textThatIsNotJSONIsRefused() {
        for text in ["", "{", "[1,]", "{\"a\" 1}", "tru", "1 2", "\"\u{01}\""] {
            #expect(throws: JSONParseError.self, "\(text)") { try JSONValue(json: Data(text.utf8)) }
        }
    }

    @Test func nestingIsBounded() {
        let deep = String(repeating: "[", count: 300) + String(repeating: "]", count: 300)
        #expect(throws: JSONParseError.self) { try JSONValue(json: Data(deep.utf8)) }
    }

    @Test func jsonTextRoundTrips() throws {
        let value: JSONValue = ["b": [1, 2.5, "x", nil, true], "a": ["nested": "ok"]]
        #expect(value.jsonText == #"{"a":{"nested":"ok"},"b":[1,2.5,"x",null,true]}"#)
        #expect(try JSONValue(json: Data(value.jsonText.utf8)) == value)
    }
}
