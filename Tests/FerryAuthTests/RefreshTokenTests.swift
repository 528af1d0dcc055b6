import FerryAuth
import FerryTestSupport
import Testing

/// Refresh tokens and the hash the database keeps of them.
@Suite(.tagSelection) struct RefreshTokenTests {
    @Test func tokenIs43Base64URLCharactersOf32Bytes() {
        let token = RefreshToken.generate()
        #expect(token.utf8.count == 43)
        #expect(Base64URL.decode(token)?.count == 32)
    }

    @Test func tokensAreUnique() {
        let tokens = Set((0..<10_000).map { _ in RefreshToken.generate() })
        #expect(tokens.count == 10_000)
    }

    @Test func hashIsStableLowercaseHexSHA256() {
        #expect(RefreshToken.hash("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        let token = RefreshToken.generate()
        let hash = RefreshToken.hash(token)
        #expect(hash == RefreshToken.hash(token))
        #expect(hash.utf8.count == 64)
        #expect(hash.allSatisfy { "0123456789abcdef".contains($0) })
        #expect(hash != RefreshToken.hash(RefreshToken.generate()))
    }

    // MARK: - Rotation

    @Test func aSuccessorIs64CharactersNamingTheChainOfTheFirstToken() {
        let first = RefreshToken.generate()
        let rotation = RefreshRotation(presented: first)
        #expect(rotation.successor.utf8.count == 64 && Base64URL.decode(rotation.successor)?.count == 48)
        #expect(rotation.presentedHash == RefreshToken.hash(first))
        #expect(rotation.successorHash == RefreshToken.hash(rotation.successor))
        let next = RefreshRotation(presented: rotation.successor)
        #expect(next.chainHash == rotation.chainHash, "every token of a session names one chain")
        #expect(RefreshRotation(presented: next.successor).chainHash == rotation.chainHash)
        #expect(RefreshRotation(presented: RefreshToken.generate()).chainHash != rotation.chainHash)
        #expect(RefreshRotation(presented: first).successor != rotation.successor, "each successor is random")
    }

    @Test func aSealedSuccessorOpensOnlyWithTheTokenItReplaced() {
        let presented = RefreshToken.generate()
        let rotation = RefreshRotation(presented: presented)
        #expect(RefreshRotation(presented: presented).unseal(rotation.sealedSuccessor) == rotation.successor)
        let other = RefreshRotation(presented: RefreshToken.generate())
        #expect(other.unseal(rotation.sealedSuccessor) != rotation.successor)
        #expect(!rotation.sealedSuccessor.contains(String(rotation.successor.suffix(20))))
        #expect(rotation.unseal("not sealed") == nil)
    }
}
