import FerryTestSupport
import Foundation
import Testing

@testable import FerryAuth

@Suite(.tagSelection) struct HMACKeyTests {
    @Test func hmacKeyMatchesRFC4231AndStaysKeyedAcrossCalls() async {
        // RFC 4231, test case 2: key "Jefe".
        let key = HMACKey(Array("Jefe".utf8))
        let expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        let message = Array("what do ya want for nothing?".utf8)
        func hex(_ digest: HMACDigest) -> String {
            digest.array.map { String(format: "%02x", $0) }.joined()
        }
        // Reused contexts (the pool) and contexts borrowed by several threads at once.
        let results = await withTaskGroup(of: String.self) { group in
            for _ in 0..<8 {
                group.addTask { (0..<100).map { _ in message.withUnsafeBufferPointer { hex(key.mac($0)) } }.last! }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.allSatisfy { $0 == expected }, "\(results)")
        #expect(hex(message.withUnsafeBufferPointer { HMACKey([]).mac($0) }) != expected)
    }
}
