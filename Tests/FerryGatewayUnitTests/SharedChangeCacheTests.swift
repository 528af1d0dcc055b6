import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// What answers the shared part of a pull without a socket or a database: snapshots read as
/// PostgreSQL writes them, done cursors, and the cache's decisions (docs/ARCHITECTURE.md,
/// "Shared-change storms"). SharedPullCacheTests checks the same against PostgreSQL.
@Suite(.tagSelection) struct SharedChangeCacheTests {
    static let ana = UUID(uuidString: "8c5e1a5e-2f4b-4a8e-9d43-1b2c3d4e5f60")!
    static let history = PullHistory(epoch: 1, timeline: 1, lsn: "0/16FB45D8", started: "1796636988.078940")

    // MARK: - Snapshots

    @Test func snapshotsSeeWhatPgVisibleInSnapshotSees() throws {
        let snapshot = try #require(PostgresSnapshot("100:110:102,105"))
        #expect(snapshot.xmin == 100 && snapshot.xmax == 110 && snapshot.running == [102, 105])
        #expect(snapshot.isVisible(99) && snapshot.isVisible(100) && snapshot.isVisible(104))
        #expect(!snapshot.isVisible(102) && !snapshot.isVisible(105))
        #expect(!snapshot.isVisible(110) && !snapshot.isVisible(.max))
        #expect(try #require(PostgresSnapshot("7:7:")).isVisible(6))
    }

    @Test func snapshotsPostgreSQLWouldNotWriteAreRefused() {
        for text in [
            "", "1:2", "2:1:", "1:2:3", "1:5:3,2", "1:5:3,3", "a:5:", "1:5:,", "1:5: 3", "-1:5:",
            "1:99999999999999999999999:",
        ] {
            #expect(PostgresSnapshot(text) == nil, "\(text)")
        }
    }

    // MARK: - Cursors

    @Test func aDoneCursorIsReadAndMovedOn() throws {
        let raw =
            #"{"lsn": "0/16FB45D8", "epoch": 1, "since": "14903:14905:14904", "started": "1796636988.078940", "timeline": 1, "last_mutation_id": 7}"#
        let cursor = try #require(SettledPullCursor(raw: raw))
        #expect(cursor.since.text == "14903:14905:14904" && cursor.sharedSince == nil && cursor.lastMutationID == 7)
        #expect(cursor.history == Self.history)
        let moved = String(
            decoding: cursor.movingShared(to: try #require(PostgresSnapshot("15000:15000:"))), as: UTF8.self)
        let again = try #require(SettledPullCursor(raw: moved))
        #expect(again.since == cursor.since && again.sharedSince?.text == "15000:15000:")
        #expect(again.lastMutationID == 7 && again.history == Self.history)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(moved.utf8)) as? [String: Any])
        #expect(
            Set(object.keys) == ["since", "shared_since", "last_mutation_id", "epoch", "timeline", "lsn", "started"])
    }

    @Test func pagingCursorsAndOlderOnesAreLeftToPostgreSQL() {
        let history = #""epoch": 1, "timeline": 1, "lsn": "0/1", "started": "1""#
        for raw in [
            #"{"since": "1:1:", "until": "2:2:", "last_mutation_id": 0, "table": "t", "stamp": "1", "key": {}, \#(history)}"#,
            #"{"since": "1:1:", \#(history)}"#,  // from before cursors named their last mutation
            #"{"since": "1:1:", "last_mutation_id": 0}"#,  // from before cursors named their history
            #"{"since": "nonsense", "last_mutation_id": 0, \#(history)}"#,
            "not json",
        ] {
            #expect(SettledPullCursor(raw: raw) == nil, "\(raw)")
        }
    }

    // MARK: - Decisions

    @Test func nothingIsAnsweredBeforeTheFirstRead() throws {
        let cache = SharedChangeCache()
        #expect(cache.decide(try cursor(since: "200:200:"), user: Self.ana, limit: 100) == .database)
    }

    @Test func unseenSharedRowsAreAnsweredAndTheOwnTablesStay() throws {
        var cache = SharedChangeCache()
        cache.apply(try refresh(at: "100:100:"))
        cache.apply(
            try refresh(at: "130:130:", since: true, rows: [("news", "1", 120, false), ("news", "2", 105, false)]))

        // A cursor from before both rows gets both, in stamp order, and a cursor that moved on.
        guard case .answer(let body, let raw) = cache.decide(try cursor(since: "101:101:"), user: Self.ana, limit: 10)
        else {
            Issue.record("not answered")
            return
        }
        let answer = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
        let news = try #require((answer["changes"] as? [String: Any])?["news"] as? [String: Any])
        #expect((news["upserts"] as? [[String: Any]])?.map { $0["id"] as? String } == ["2", "1"])
        #expect((news["deletes"] as? [Any])?.isEmpty == true)
        #expect(answer["has_more"] as? Bool == false && answer["last_mutation_id"] as? Int == 3)
        let moved = try #require(SettledPullCursor(raw: String(decoding: raw, as: UTF8.self)))
        #expect(moved.since.text == "101:101:" && moved.sharedSince?.text == "130:130:")

        // One that saw the first gets the second alone; one that saw both, nothing and its cursor back.
        guard case .answer(let second, _) = cache.decide(try cursor(since: "110:110:"), user: Self.ana, limit: 10)
        else {
            Issue.record("not answered")
            return
        }
        #expect(String(decoding: second, as: UTF8.self).contains(#""id": "1""#))
        #expect(!String(decoding: second, as: UTF8.self).contains(#""id": "2""#))
        let seen = try cursor(since: "101:101:", shared: "130:130:")
        #expect(
            cache.decide(seen, user: Self.ana, limit: 10)
                == .answer(
                    body: Array(#"{"changes": {}, "has_more": false, "last_mutation_id": 3}"#.utf8),
                    cursor: Array(seen.raw.utf8)))
    }

    @Test func anOwnChangeTheCursorHasNotSeenGoesToPostgreSQL() throws {
        var cache = SharedChangeCache()
        cache.apply(try refresh(at: "100:100:"))
        cache.noteOwnChange(of: Self.ana, xid: 150)
        #expect(cache.decide(try cursor(since: "140:140:"), user: Self.ana, limit: 10) == .database)
        #expect(cache.decide(try cursor(since: "140:160:150"), user: Self.ana, limit: 10) == .database)
        #expect(cache.decide(try cursor(since: "151:151:"), user: Self.ana, limit: 10) != .database)
        // Another user's change is not ana's.
        let bo = UUID()
        #expect(cache.decide(try cursor(since: "140:140:"), user: bo, limit: 10) != .database)
        // A cue without a transaction can never be shown seen.
        cache.noteOwnChange(of: bo, xid: nil)
        #expect(cache.decide(try cursor(since: "900:900:"), user: bo, limit: 10) == .database)
    }

    @Test func anEarlierChangeStillRunningInTheCursorGoesToPostgreSQLThoughALaterOneIsSeen() throws {
        // 150 began, 151 committed, the cursor was taken (150 running), then 150 committed.
        var cache = SharedChangeCache()
        cache.apply(try refresh(at: "100:100:"))
        cache.noteOwnChange(of: Self.ana, xid: 151)
        cache.noteOwnChange(of: Self.ana, xid: 150)
        #expect(cache.decide(try cursor(since: "150:152:150"), user: Self.ana, limit: 10) == .database)
        #expect(cache.decide(try cursor(since: "152:152:"), user: Self.ana, limit: 10) != .database)
    }

    @Test func heardChangesForgetTheLowestAndStillAnswerForThem() {
        var heard = HeardChanges()
        for xid: UInt64 in [10, 14, 12, 13, 11, 12] { heard.add(xid) }
        #expect(heard.recent == [11, 12, 13, 14] && heard.highestForgotten == 10)
        // 10 was let go: only a snapshot whose xmin is past it is sure to see it.
        #expect(heard.areVisible(in: PostgresSnapshot("11:15:")!))
        #expect(!heard.areVisible(in: PostgresSnapshot("10:15:10")!))
        #expect(!heard.areVisible(in: PostgresSnapshot("10:15:")!))
        #expect(!heard.areVisible(in: PostgresSnapshot("11:15:12")!))
    }

    @Test func cursorsOlderThanWhatTheCacheKnowsGoToPostgreSQL() throws {
        var cache = SharedChangeCache()
        cache.apply(try refresh(at: "100:105:102"))
        // Its shared snapshot must have seen everything below the first read's xmax.
        #expect(cache.decide(try cursor(since: "104:104:"), user: Self.ana, limit: 10) == .database)
        #expect(cache.decide(try cursor(since: "105:105:"), user: Self.ana, limit: 10) != .database)
        // Transactions still running elsewhere do not hold a cursor back, unless it has not
        // seen one that the first read had seen (101 had committed then).
        #expect(cache.decide(try cursor(since: "102:107:102,106"), user: Self.ana, limit: 10) != .database)
        #expect(cache.decide(try cursor(since: "101:107:101,102"), user: Self.ana, limit: 10) == .database)
        // Another history (a restore, a failover) is PostgreSQL's to judge.
        var other = try cursor(since: "105:105:")
        other.history.timeline = 2
        #expect(cache.decide(other, user: Self.ana, limit: 10) == .database)
    }

    @Test func theListenerReconnectingForgetsUntilAReadSentAfterIt() throws {
        var cache = SharedChangeCache()
        cache.apply(try refresh(at: "100:100:"))
        let sentBefore = try refresh(at: "120:120:", since: true, generation: cache.generation)
        cache.listenerReset()
        cache.apply(sentBefore)
        #expect(cache.ownHorizon == nil)
        #expect(cache.decide(try cursor(since: "130:130:"), user: Self.ana, limit: 10) == .database)
        cache.apply(try refresh(at: "140:140:", since: true, generation: cache.generation))
        #expect(cache.ownHorizon?.text == "140:140:")
        #expect(cache.decide(try cursor(since: "130:130:"), user: Self.ana, limit: 10) == .database)
        #expect(cache.decide(try cursor(since: "140:140:"), user: Self.ana, limit: 10) != .database)
    }

    @Test func moreRowsThanTheLimitARestrictedTableOrAPurgeGoToPostgreSQL() throws {
        var cache = SharedChangeCache()
        cache.apply(try refresh(at: "100:100:"))
        cache.apply(
            try refresh(at: "130:130:", since: true, rows: [("news", "1", 110, false), ("news", "2", 111, true)]))
        #expect(cache.decide(try cursor(since: "100:100:"), user: Self.ana, limit: 1) == .database)
        #expect(cache.decide(try cursor(since: "100:100:"), user: Self.ana, limit: 2) != .database)

        var purged = try refresh(at: "131:131:", since: true)
        purged.purgedThrough = 120
        purged.purgeXID = 125
        cache.apply(purged)
        #expect(cache.decide(try cursor(since: "100:100:"), user: Self.ana, limit: 2) == .database)
        #expect(cache.decide(try cursor(since: "126:126:"), user: Self.ana, limit: 2) != .database)

        var restricted = try refresh(at: "132:132:", since: true)
        restricted.isOpen = false
        cache.apply(restricted)
        #expect(cache.decide(try cursor(since: "126:126:"), user: Self.ana, limit: 2) == .database)
    }

    // MARK: - Making them

    private func cursor(since: String, shared: String? = nil) throws -> SettledPullCursor {
        let sharedMember = shared.map { #", "shared_since": "\#($0)""# } ?? ""
        return try #require(
            SettledPullCursor(
                raw:
                    #"{"since": "\#(since)"\#(sharedMember), "last_mutation_id": 3, "epoch": 1, "timeline": 1, "lsn": "0/16FB45D8", "started": "1796636988.078940"}"#
            ))
    }

    private func refresh(
        at position: String, since: Bool = false, rows: [(String, String, UInt64, Bool)] = [], generation: Int = 0
    ) throws -> SharedChangeCache.Refresh {
        var changed: [String: [String: SharedChangeCache.Row]] = [:]
        for (table, id, stamp, deleted) in rows {
            let key = #"{"id": "\#(id)"}"#
            let json = deleted ? key : #"{"id": "\#(id)", "title": "t\#(id)"}"#
            changed[table, default: [:]][key] = SharedChangeCache.Row(
                stamp: stamp, deleted: deleted, json: Array(json.utf8))
        }
        return SharedChangeCache.Refresh(
            position: try #require(PostgresSnapshot(position)), history: Self.history, purgedThrough: 0, purgeXID: nil,
            isOpen: true, rows: changed, generation: generation, isIncremental: since)
    }
}
