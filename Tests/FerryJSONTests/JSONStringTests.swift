import FerryJSON
import FerryTestSupport
import Testing

/// JSON text written straight into bytes: strings and decimal numbers.
@Suite(.tagSelection) struct JSONStringTests {
    @Test func decimalsAreWrittenAsASCIIWithOptionalZeroPadding() {
        func decimal(_ value: Int, _ digits: Int = 1) -> String {
            var buffer: [UInt8] = []
            buffer.appendDecimal(value, minimumDigits: digits)
            return String(decoding: buffer, as: UTF8.self)
        }
        #expect(decimal(0) == "0")
        #expect(decimal(9) == "9")
        #expect(decimal(10) == "10")
        #expect(decimal(1_234_567) == "1234567")
        #expect(decimal(7, 3) == "007")
        #expect(decimal(2026, 4) == "2026")
        #expect(decimal(12_345, 3) == "12345")
        #expect(decimal(-42) == "-42")
        #expect(decimal(Int.max) == String(Int.max))
        #expect(decimal(Int.min) == String(Int.min))
    }

    @Test func jsonStringsEscapeWhatRFC8259Requires() {
        var buffer: [UInt8] = []
        JSONString.append("a\"b\\c\nd\u{1}é", to: &buffer)
        #expect(String(decoding: buffer, as: UTF8.self) == #""a\"b\\c\nd\u0001é""#)
    }
}
