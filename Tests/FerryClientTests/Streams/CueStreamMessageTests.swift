import FerryTestSupport
import Testing

@testable import FerryClient

/// The stream's JSON messages and what a close asks of the client.
@Suite(.tagSelection) struct CueStreamMessageTests {
    @Test func helloCarriesItsHeartbeatClampedToWhatAClientBelieves() {
        #expect(
            CueStreamMessage(json: #"{"type":"hello","user_id":"u","device_id":"d","heartbeat_ms":25000}"#)
                == .hello(heartbeatMilliseconds: 25_000))
        #expect(CueStreamMessage(json: #"{"type":"hello","heartbeat_ms":0}"#) == .hello(heartbeatMilliseconds: 100))
        #expect(
            CueStreamMessage(json: #"{"type":"hello","heartbeat_ms":1e300}"#) == .hello(heartbeatMilliseconds: 25_000))
        #expect(
            CueStreamMessage(json: #"{"type":"hello","heartbeat_ms":99999999}"#)
                == .hello(heartbeatMilliseconds: 600_000))
        #expect(CueStreamMessage(json: #"{"type":"hello"}"#) == .hello(heartbeatMilliseconds: 25_000))
    }

    @Test func aCueHasItsTablesAndOriginOrNull() {
        #expect(
            CueStreamMessage(json: #"{"type":"cue","tables":["tasks","notes"],"origin":"dev-1"}"#)
                == .cue(tables: ["tasks", "notes"], origin: "dev-1"))
        #expect(CueStreamMessage(json: #"{"type":"cue","tables":[],"origin":null}"#) == .cue(tables: [], origin: nil))
    }

    @Test func tokenExpiringAndClosedCarryTheirNumbers() {
        #expect(
            CueStreamMessage(json: #"{"type":"token_expiring","in_ms":1500}"#) == .tokenExpiring(inMilliseconds: 1500))
        #expect(
            CueStreamMessage(json: #"{"code":4003,"reason":"session_revoked"}"#, eventType: "closed")
                == .closed(code: 4003, reason: "session_revoked"))
    }

    @Test func anythingElseIsOtherAndIgnored() {
        #expect(CueStreamMessage(json: #"{"type":"presence"}"#) == .other(type: "presence"))
        #expect(CueStreamMessage(json: "not json", eventType: "message") == .other(type: "message"))
        #expect(CueStreamMessage(json: "[1,2]") == .other(type: ""))
    }

    @Test func theCloseReasonDecidesBeforeTheCodeAsLinuxLosesCustomCodes() {
        #expect(CueStreamCloseVerdict(code: 1003, reason: "token_expired") == .refreshAndReconnect)
        #expect(CueStreamCloseVerdict(code: 1003, reason: "session_revoked") == .sessionEnded(code: 4003))
        #expect(CueStreamCloseVerdict(code: 1003, reason: "account_deleted") == .sessionEnded(code: 4004))
        #expect(CueStreamCloseVerdict(code: 4001, reason: nil) == .refreshAndReconnect)
        #expect(CueStreamCloseVerdict(code: 4003, reason: "") == .sessionEnded(code: 4003))
        #expect(CueStreamCloseVerdict(code: 4004, reason: nil) == .sessionEnded(code: 4004))
        for code in [4008, 1001, 1000, 1008, 1011] {
            #expect(CueStreamCloseVerdict(code: code, reason: "whatever") == .reconnect)
        }
        #expect(CueStreamCloseVerdict(code: nil, reason: nil) == .reconnect)
    }

    @Test func aRefusalEndsTheSessionOnlyWhenItSaysRevoked() {
        #expect(CueStreamCloseVerdict(refusedWith: 401, code: "session_revoked") == .sessionEnded(code: 4003))
        #expect(CueStreamCloseVerdict(refusedWith: 401, code: "token_expired") == .refreshAndReconnect)
        #expect(CueStreamCloseVerdict(refusedWith: 401, code: nil) == .refreshAndReconnect)
        for status in [429, 500, 503, 404] {
            #expect(CueStreamCloseVerdict(refusedWith: status, code: "session_revoked") == .reconnect)
        }
    }
}
