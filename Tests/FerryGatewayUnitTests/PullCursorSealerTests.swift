import FerryAuth
import FerryTestSupport
import Testing

@testable import FerryGateway

/// The sealed pull cursor, without a database.
@Suite(.tagSelection) struct PullCursorSealerTests {
    let secret = String(repeating: "s", count: 32)
    let alice = Identity(userID: "u-1", sessionID: "s-1", deviceID: "d-1", isAnonymous: true)

    @Test func aSealedCursorOpensForItsDeviceOnly() {
        let sealer = PullCursorSealer(secret: secret)
        let cursor = sealer.seal(Array(#"{"since": "5:9:7"}"#.utf8), for: alice)
        #expect(sealer.open(cursor, for: alice) == #"{"since": "5:9:7"}"#)
        var otherDevice = alice
        otherDevice.deviceID = "d-2"
        #expect(sealer.open(cursor, for: otherDevice) == nil)
        var otherUser = alice
        otherUser.userID = "u-2"
        #expect(sealer.open(cursor, for: otherUser) == nil)
    }

    @Test func editedOrForeignCursorsDoNotOpenAndRotationKeepsThePreviousSecret() {
        let old = PullCursorSealer(secret: secret)
        let cursor = old.seal(Array(#"{"since": "5:9:7"}"#.utf8), for: alice)
        let rotated = PullCursorSealer(secret: String(repeating: "t", count: 32), previousSecret: secret)
        #expect(rotated.open(cursor, for: alice) == #"{"since": "5:9:7"}"#)
        #expect(PullCursorSealer(secret: String(repeating: "t", count: 32)).open(cursor, for: alice) == nil)
        let parts = cursor.split(separator: ".")
        let edited = Base64URL.encode(Array(#"{"since": "1:1:"}"#.utf8)) + "." + parts[1]
        for bad in [edited, "", ".", "abc", String(parts[0]), cursor + "x", String(repeating: "a", count: 5000)] {
            #expect(old.open(bad, for: alice) == nil, "\(bad)")
        }
    }
}
