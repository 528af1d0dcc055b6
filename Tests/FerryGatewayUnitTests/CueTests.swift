import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// The pieces of the cue path that need no socket: payload parsing, the messages,
/// coalescing and the timing wheel.
@Suite(.tagSelection) struct CueTests {
    @Test func parsesAUsersCueWithItsOrigin() throws {
        let cue = try #require(
            Cue(payload: "8c5e1a5e-2f4b-4a8e-9d43-1b2c3d4e5f60 3b1f0000-0000-4000-8000-000000000001 game_records"))
        #expect(cue.audience == .user(UUID(uuidString: "8c5e1a5e-2f4b-4a8e-9d43-1b2c3d4e5f60")!))
        #expect(cue.origin == "3b1f0000-0000-4000-8000-000000000001")
        #expect(cue.table == "game_records")
    }

    @Test func parsesASharedCueWithoutOriginAndATableNameWithSpaces() throws {
        let cue = try #require(Cue(payload: "* - daily news"))
        #expect(cue.audience == .everyone)
        #expect(cue.origin == nil)
        #expect(cue.table == "daily news")
    }

    @Test func readsTheWritersTransactionAfterTheDevicesLastAt() throws {
        let user = "8c5e1a5e-2f4b-4a8e-9d43-1b2c3d4e5f60"
        let pushed = try #require(Cue(payload: "\(user) ana@phone@123456 game_records"))
        #expect(pushed.origin == "ana@phone" && pushed.xid == 123_456 && pushed.table == "game_records")
        let operators = try #require(Cue(payload: "\(user) -@77 profiles"))
        #expect(operators.origin == nil && operators.xid == 77)
        // The previous version's payload (and a hand-sent NOTIFY): no transaction.
        let old = try #require(Cue(payload: "\(user) phone@home profiles"))
        #expect(old.origin == "phone@home" && old.xid == nil)
        // More digits than an xid8 holds are part of the device's name.
        let long = try #require(Cue(payload: "\(user) d@99999999999999999999 t"))
        #expect(long.xid == nil && long.origin == "d@99999999999999999999")
    }

    @Test func refusesPayloadsThatAreNotCues() {
        for payload in ["", "*", "* -", "* - ", "not-a-uuid - t", "{\"session\":1}"] {
            #expect(Cue(payload: payload) == nil, "\(payload)")
        }
    }

    @Test func messagesAreProtocolJSON() throws {
        let user = UUID(uuidString: "8C5E1A5E-2F4B-4A8E-9D43-1B2C3D4E5F60")!
        let hello = String(
            decoding: StreamMessage.hello(userID: user, deviceID: "d\"1", heartbeatMilliseconds: 25_000), as: UTF8.self)
        #expect(
            hello
                == #"{"type":"hello","user_id":"8c5e1a5e-2f4b-4a8e-9d43-1b2c3d4e5f60","device_id":"d\"1","heartbeat_ms":25000}"#
        )
        #expect(
            String(decoding: StreamMessage.cue(tables: ["a", "b"], origin: nil), as: UTF8.self)
                == #"{"type":"cue","tables":["a","b"],"origin":null}"#)
        #expect(
            String(decoding: StreamMessage.tokenExpiring(inMilliseconds: 1500), as: UTF8.self)
                == #"{"type":"token_expiring","in_ms":1500}"#)
        // Every message parses as JSON.
        for bytes in [hello.utf8.map { $0 }, StreamMessage.cue(tables: ["x"], origin: "d")] {
            #expect(try JSONSerialization.jsonObject(with: Data(bytes)) is [String: Any])
        }
    }

    @Test func coalescingMergesTablesAndForgetsAnOriginThatDiffers() {
        let first = PendingCue(table: "a", origin: "phone", since: 5)
        var pending = first.merging(table: "b", origin: "phone")
        #expect(pending.merging(table: "a", origin: "phone") === pending, "a merge that changes nothing shares the cue")
        #expect(String(decoding: first.message, as: UTF8.self) == #"{"type":"cue","tables":["a"],"origin":"phone"}"#)
        #expect(
            String(decoding: pending.message, as: UTF8.self) == #"{"type":"cue","tables":["a","b"],"origin":"phone"}"#)
        pending = pending.merging(table: "c", origin: "tablet")
        #expect(
            String(decoding: pending.message, as: UTF8.self) == #"{"type":"cue","tables":["a","b","c"],"origin":null}"#)
        pending = pending.merging(table: nil, origin: nil).merging(table: "d", origin: nil)
        #expect(String(decoding: pending.message, as: UTF8.self) == #"{"type":"cue","tables":[],"origin":null}"#)
        #expect(pending.since == 5)
    }

    final class Item: TimingWheelElement {
        let name: String
        var wheelPosition: TimingWheelPosition?
        init(_ name: String) { self.name = name }
    }

    @Test func theWheelFiresEachDeadlineOnceAndNeverEarly() {
        var wheel = TimingWheel<Item>(tickMilliseconds: 100, slotCount: 8, now: 1_000)
        wheel.schedule(Item("soon"), at: 1_150)
        wheel.schedule(Item("later"), at: 1_950)
        // Beyond one turn of the wheel (8 × 100 ms): must wait for its own turn.
        wheel.schedule(Item("far"), at: 3_000)
        var fired: [String] = []
        for now in stride(from: UInt64(1_000), through: 3_100, by: 50) {
            for (item, deadline) in wheel.advance(to: now) {
                #expect(deadline <= now)
                fired.append("\(item.name)@\(now)")
            }
        }
        #expect(fired == ["soon@1200", "later@2000", "far@3000"])
        #expect(wheel.count == 0)
    }

    @Test func theWheelCatchesUpAfterAStallAndTakesPastDeadlinesAtTheNextTick() {
        var wheel = TimingWheel<Item>(tickMilliseconds: 100, slotCount: 4, now: 0)
        wheel.schedule(Item("a"), at: 150)
        wheel.schedule(Item("b"), at: 1_000)
        var fired: [String] = []
        fired += wheel.advance(to: 5_000).map(\.element.name)
        #expect(fired.sorted() == ["a", "b"])
        wheel.schedule(Item("past"), at: 10)
        fired += wheel.advance(to: 5_050).map(\.element.name)
        #expect(fired.count == 2)
        fired += wheel.advance(to: 5_100).map(\.element.name)
        #expect(fired.last == "past")
    }

    @Test func aRescheduledElementFiresOnceAtItsNewDeadline() {
        var wheel = TimingWheel<Item>(tickMilliseconds: 100, slotCount: 8, now: 0)
        let item = Item("moved")
        wheel.schedule(item, at: 200)
        wheel.schedule(Item("stays"), at: 200)
        wheel.schedule(item, at: 500)
        #expect(wheel.count == 2)
        #expect(wheel.advance(to: 200).map(\.element.name) == ["stays"])
        #expect(wheel.advance(to: 400).isEmpty)
        #expect(wheel.advance(to: 500).map(\.element.name) == ["moved"])
        #expect(wheel.count == 0)
    }

    @Test func aCancelledElementIsNoLongerHeldAndOthersInItsSlotStillFire() {
        var wheel = TimingWheel<Item>(tickMilliseconds: 100, slotCount: 8, now: 0)
        weak var gone: Item?
        do {
            let cancelled = Item("cancelled")
            gone = cancelled
            wheel.schedule(Item("first"), at: 300)
            wheel.schedule(cancelled, at: 300)
            wheel.schedule(Item("last"), at: 300)
            wheel.cancel(cancelled)
            wheel.cancel(cancelled)
            #expect(cancelled.wheelPosition == nil)
        }
        #expect(gone == nil, "the wheel still holds a cancelled element")
        #expect(wheel.count == 2)
        #expect(wheel.advance(to: 300).map(\.element.name).sorted() == ["first", "last"])
        #expect(wheel.count == 0)
    }
}

/// When the gateway sends the cues pushes queued (``QueuedCueSending``): one send at a
/// time, and every commit during a send gets exactly one more after it.
@Suite(.tagSelection) struct QueuedCueSendingTests {
    /// What each event answered (whether to start a send), in order.
    func answers(_ events: [String]) -> [Bool] {
        var sending = QueuedCueSending()
        return events.map { $0 == "queued" ? sending.queued() : sending.sent() }
    }

    @Test func aCommitWhileIdleSendsAtOnceAndNothingMoreAfter() {
        #expect(answers(["queued", "sent"]) == [true, false])
        var sending = QueuedCueSending()
        _ = sending.queued()
        #expect(sending.isSending)
        _ = sending.sent()
        #expect(!sending.isSending)
    }

    @Test func commitsDuringASendFoldIntoOneMoreSend() {
        let events = ["queued", "queued", "queued", "sent", "sent", "queued"]
        #expect(
            answers(events) == [true, false, false, true, false, true],
            "one more send for the commits its snapshot may have missed, then idle again")
    }
}
