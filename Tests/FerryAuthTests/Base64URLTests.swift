import FerryAuth
import FerryTestSupport
import Foundation
import Testing

/// Unpadded base64url, as tokens spell bytes.
@Suite(.tagSelection) struct Base64URLTests {
    @Test func encodesRFC4648VectorsWithoutPadding() {
        let vectors = [
            "": "", "f": "Zg", "fo": "Zm8", "foo": "Zm9v", "foob": "Zm9vYg", "fooba": "Zm9vYmE", "foobar": "Zm9vYmFy",
        ]
        for (plain, encoded) in vectors {
            #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
            #expect(Base64URL.decode(encoded) == Array(plain.utf8))
        }
    }

    @Test func usesTheURLAlphabet() {
        #expect(Base64URL.encode([0xFB, 0xFF, 0xBF]) == "-_-_")
        #expect(Base64URL.decode("-_-_") == [0xFB, 0xFF, 0xBF])
    }

    @Test func roundTripsEveryLengthAndByte() {
        let bytes = (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 37) }
        for length in 0...bytes.count {
            #expect(Base64URL.decode(Base64URL.encode(bytes[..<length])) == Array(bytes[..<length]))
        }
    }

    @Test func rejectsStandardAlphabetPaddingAndBadLengths() {
        #expect(Base64URL.decode("+/+/") == nil)
        #expect(Base64URL.decode("Zg==") == nil)
        #expect(Base64URL.decode("Zm9vY") == nil)
        #expect(Base64URL.decode("Zm 9v") == nil)
        #expect(Base64URL.decode("Zm9v\n") == nil)
        #expect(Base64URL.decode("é") == nil)
    }

    @Test func rejectsNonZeroUnusedBits() {
        #expect(Base64URL.decode("Zh") == nil)
        #expect(Base64URL.decode("Zm9") == nil)
        #expect(Base64URL.decode("Zm8") == Array("fo".utf8))
    }
}
