import FerryAuth
import Testing

/// One-time codes: typeable, random, normalised as a person types them, hashed.
@Suite struct OneTimeCodeTests {
    @Test func aCodeIsEightCharactersOfTheAlphabetAndCodesDiffer() {
        let codes = (0..<200).map { _ in OneTimeCode.generate() }
        for code in codes {
            #expect(code.utf8.count == OneTimeCode.length)
            #expect(code.utf8.allSatisfy(OneTimeCode.alphabet.contains), "\(code)")
            #expect(OneTimeCode.normalize(code) == code)
        }
        #expect(Set(codes).count == codes.count)
        // Every character turns up: the bytes are not biased towards part of the alphabet.
        #expect(Set(codes.joined().utf8).count == OneTimeCode.alphabet.count)
    }

    @Test func typedCodesAreReadWithoutCaseSpacesOrHyphens() {
        #expect(OneTimeCode.normalize("k7p2-qx9m") == "K7P2QX9M")
        #expect(OneTimeCode.normalize(" K7P2 QX9M ") == "K7P2QX9M")
        for wrong in ["K7P2QX9", "K7P2QX9MM", "K7P2QX0M", "K7P2QXIM", "", "K7P2QX9Ö"] {
            #expect(OneTimeCode.normalize(wrong) == nil, "\(wrong)")
        }
    }

    @Test func theHashIsTheSHA256OfTheCode() {
        #expect(OneTimeCode.hash("K7P2QX9M").count == 64)
        #expect(OneTimeCode.hash("K7P2QX9M") != OneTimeCode.hash("K7P2QX9N"))
    }
}
