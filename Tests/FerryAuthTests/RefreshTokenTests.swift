import FerryAuth
import FerryTestSupport
import Foundation
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

    // MARK: - Shards

    @Test func aTokenOfShardNIsSentPrefixedAndKnownByItsBody() {
        let token = RefreshToken.generate()
        #expect(RefreshToken.issued(token, shard: 0) == token)
        #expect(RefreshToken.issued(token, shard: 65535) == "65535.\(token)")
        #expect(RefreshToken.body(of: "7.\(token)") == token)
        #expect(RefreshToken.body(of: token) == token)
        for notAPrefix in ["0.\(token)", "07.\(token)", "65536.\(token)", "+7.\(token)", ".\(token)", "123456.x"] {
            #expect(RefreshToken.body(of: notAPrefix) == notAPrefix, "\(notAPrefix)")
        }
        let rotation = RefreshRotation(presented: "7.\(token)")
        #expect(rotation.presentedHash == RefreshToken.hash(token) && rotation.presented == token)
        #expect(RefreshRotation(presented: "7.\(rotation.successor)").chainHash == rotation.chainHash)
    }

    @Test func aUserIdNamesItsShardInItsFirst16BitsWhenVersion8() throws {
        #expect(Shard.of(try #require(UUID(uuidString: "0102abcd-0000-8000-8000-000000000000"))) == 258)
        #expect(Shard.of(try #require(UUID(uuidString: "ffffabcd-0000-8000-8000-000000000000"))) == 65535)
        #expect(Shard.of(try #require(UUID(uuidString: "0102abcd-0000-4000-8000-000000000000"))) == 0)
        #expect(Shard.of(UUID()) == 0, "a version 4 id is unsharded")
    }
}
