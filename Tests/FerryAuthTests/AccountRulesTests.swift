import FerryAuth
import FerryTestSupport
import Testing

/// Which emails and passwords an account accepts.
@Suite(.tagSelection) struct AccountRulesTests {
    @Test func emailIsTrimmedAndLowercased() {
        #expect(EmailAddress.normalize("  Ana.Lima@Example.ORG\n") == "ana.lima@example.org")
        #expect(EmailAddress.normalize("a+tag@sub.example.co") == "a+tag@sub.example.co")
        #expect(EmailAddress.normalize("ÉLODIE@exemple.fr") == "élodie@exemple.fr")
    }

    @Test func emailWithoutExactlyOneAtOrWithEmptyPartsIsInvalid() {
        for text in ["", "   ", "ana", "ana@", "@example.org", "ana@@example.org", "a@b@example.org"] {
            #expect(EmailAddress.normalize(text) == nil, "\(text)")
        }
    }

    @Test func emailDomainNeedsADotBetweenLabels() {
        for text in ["ana@localhost", "ana@.org", "ana@example.", "ana@example..org"] {
            #expect(EmailAddress.normalize(text) == nil, "\(text)")
        }
    }

    @Test func emailWithSpacesOrControlCharactersIsInvalid() {
        for text in [
            "ana lima@example.org", "ana@exa mple.org", "ana\t@example.org", "ana\u{0}@example.org",
            "ana@example.org\u{7F}x",
        ] {
            #expect(EmailAddress.normalize(text) == nil, "\(text)")
        }
    }

    @Test func emailLongerThan254BytesIsInvalid() {
        let domain = "@example.org"
        let fits = String(repeating: "a", count: 254 - domain.utf8.count) + domain
        #expect(EmailAddress.normalize(fits) == fits)
        #expect(EmailAddress.normalize("a" + fits) == nil)
    }

    @Test func passwordNeedsEightCharactersAndAtMost1024Bytes() {
        #expect(!PasswordPolicy.isAcceptable(""))
        #expect(!PasswordPolicy.isAcceptable("1234567"))
        #expect(PasswordPolicy.isAcceptable("12345678"))
        #expect(PasswordPolicy.isAcceptable(String(repeating: "x", count: 1024)))
        #expect(!PasswordPolicy.isAcceptable(String(repeating: "x", count: 1025)))
    }

    @Test func passwordLengthCountsCharactersNotBytes() {
        #expect(!PasswordPolicy.isAcceptable("ééééééé"))
        #expect(PasswordPolicy.isAcceptable("éééééééé"))
        #expect(!PasswordPolicy.isAcceptable(String(repeating: "👩‍👩‍👧", count: 7)))
        #expect(!PasswordPolicy.isAcceptable(String(repeating: "é", count: 513)))
    }
}
