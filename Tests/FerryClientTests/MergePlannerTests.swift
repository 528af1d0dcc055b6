import Foundation
import Testing

@testable import FerryClient

/// A table of each strategy, as `GET /v1/schema` lists the examples' (with their
/// constant defaults).
enum PlannerTables {
    static let tasks = TableSchema(
        name: "tasks", strategy: .lww, key: ["user_id", "id"], owner: "user_id",
        columns: [
            .init(name: "id", type: "text"), .init(name: "user_id", type: "uuid"),
            .init(name: "title", type: "text", defaultValue: ""),
            .init(name: "position", type: "double precision", defaultValue: 0),
            .init(name: "updated_at", type: "timestamp with time zone"),
        ])
    static let gameRecords = TableSchema(
        name: "game_records", strategy: .insertOnly, key: ["user_id", "id"], owner: "user_id",
        columns: [
            .init(name: "id", type: "text"), .init(name: "user_id", type: "uuid"),
            .init(name: "seconds", type: "integer"),
        ])
    static let achievements = TableSchema(
        name: "achievements", strategy: .set, key: ["user_id", "achievement_id"], owner: "user_id",
        columns: [.init(name: "user_id", type: "uuid"), .init(name: "achievement_id", type: "text")])
    static let activeGame = TableSchema(
        name: "active_game", strategy: .deviceLock, key: ["user_id", "slot"], owner: "user_id",
        columns: [
            .init(name: "user_id", type: "uuid"), .init(name: "slot", type: "text"),
            .init(name: "hints", type: "integer", defaultValue: 0),
            .init(name: "notes", type: "jsonb", defaultValue: [:]),
        ])
    static let subscriptions = TableSchema(
        name: "subscriptions", strategy: .readonly, key: ["user_id"], owner: "user_id",
        columns: [.init(name: "user_id", type: "uuid"), .init(name: "plan", type: "text", defaultValue: "free")])
    static let dailyPuzzles = TableSchema(
        name: "daily_puzzles", strategy: .shared, key: ["day"], owner: nil,
        columns: [.init(name: "day", type: "date"), .init(name: "grid", type: "text")])

    static let all = [tasks, gameRecords, achievements, activeGame, subscriptions, dailyPuzzles]
    static let byName = Dictionary(uniqueKeysWithValues: all.map { ($0.name, $0) })

    /// A row of `table` as pull sends it, keyed by `key`, owned by ``owner`` (when owned).
    static func serverRow(_ table: TableSchema, key: String, _ columns: FerryRow = [:]) -> FerryRow {
        var row: FerryRow = [:]
        if let ownerColumn = table.owner { row[ownerColumn] = .string(owner) }
        // (A table keyed by its owner alone has one row per user: `key` names nothing.)
        if let column = table.key.first(where: { $0 != table.owner }) { row[column] = .string(key) }
        return row.merging(columns) { _, given in given }
    }
}

/// One pending mutation of `table`'s row `key` (its body as the app wrote it: no owner).
func mutation(
    _ id: Int64, _ op: FerryOperation, _ table: TableSchema, key: String, _ columns: FerryRow = [:]
) throws -> PendingMutation {
    var body = columns
    if let column = table.key.first(where: { $0 != table.owner }) { body[column] = .string(key) }
    let rowKey = try MergePlanner.rowKey(of: body, in: table, owner: owner)
    return PendingMutation(id: id, table: table.name, op: op, body: body, key: rowKey.key)
}

func onePage(_ table: TableSchema, upserts: [FerryRow] = [], deletes: [FerryRow] = [], lastMutationID: Int64 = 0)
    -> PullPage
{
    PullPage(
        changes: [table.name: .init(upserts: upserts, deletes: deletes)], cursor: "c", hasMore: false,
        lastMutationID: lastMutationID)
}

/// The merge's rule as values, with no SQLite: a pulled row is the server's truth, and
/// the writes the server has not acknowledged stay on top of it.
@Suite(.tagSelection) struct MergePlannerTests {
    // MARK: - No pending writes: the page is written as it is, for every strategy

    @Test(arguments: PlannerTables.all)
    func aPulledRowWithNoPendingWriteIsWrittenAsItIs(_ table: TableSchema) throws {
        let row = PlannerTables.serverRow(table, key: "k")
        let plan = try MergePlanner.plan(
            onePage(table, upserts: [row]), tables: PlannerTables.byName, owner: owner, outbox: [])
        #expect(plan.rows == [.put(table: table.name, row: row)])
        #expect(plan.shadows.isEmpty)
    }

    @Test(arguments: PlannerTables.all)
    func aPulledDeleteWithNoPendingWriteRemovesTheRow(_ table: TableSchema) throws {
        let key = try MergePlanner.keyRow(of: PlannerTables.serverRow(table, key: "k"), in: table, owner: nil)
        let plan = try MergePlanner.plan(
            onePage(table, deletes: [key]), tables: PlannerTables.byName, owner: owner, outbox: [])
        #expect(plan.rows == [.remove(table: table.name, key: key)])
        #expect(plan.shadows.isEmpty)
    }

    @Test func aPageOfATableNotInTheSchemaIsSkipped() throws {
        let page = onePage(PlannerTables.tasks, upserts: [PlannerTables.serverRow(PlannerTables.tasks, key: "k")])
        #expect(try MergePlanner.plan(page, tables: [:], owner: owner, outbox: []) == MergePlan())
    }

    @Test func aPulledRowWithoutItsKeyIsAnError() {
        let page = onePage(PlannerTables.tasks, upserts: [["id": "k"]])
        #expect(throws: LocalStoreError.missingKey(table: "tasks", column: "user_id")) {
            try MergePlanner.plan(page, tables: PlannerTables.byName, owner: owner, outbox: [])
        }
    }

    // MARK: - Pending writes stay on top, per strategy

    @Test func lwwAPendingUpsertStaysOnTopOfThePulledRowWhichBecomesTheShadow() throws {
        let table = PlannerTables.tasks
        let server = PlannerTables.serverRow(table, key: "t", ["title": "theirs", "position": 2.0])
        let pending = try mutation(1, .upsert, table, key: "t", ["title": "mine"])
        let plan = try MergePlanner.plan(
            onePage(table, upserts: [server]), tables: PlannerTables.byName, owner: owner, outbox: [pending])
        #expect(plan.rows == [.put(table: "tasks", row: server.merging(["title": "mine"]) { _, mine in mine })])
        #expect(plan.shadows == [.set(pending.rowKey, row: server)])
    }

    @Test func lwwAPendingDeleteStaysDeletedThroughAPulledRow() throws {
        let table = PlannerTables.tasks
        let server = PlannerTables.serverRow(table, key: "t", ["title": "theirs"])
        let pending = try mutation(1, .delete, table, key: "t")
        let plan = try MergePlanner.plan(
            onePage(table, upserts: [server]), tables: PlannerTables.byName, owner: owner, outbox: [pending])
        #expect(plan.rows == [.remove(table: "tasks", key: pending.rowKey.columns)])
        #expect(plan.shadows == [.set(pending.rowKey, row: server)])
    }

    @Test func lwwAPulledDeleteOfARowWithAPendingUpsertLeavesTheUpsertOnANewRow() throws {
        let table = PlannerTables.tasks
        let pending = try mutation(1, .upsert, table, key: "t", ["title": "mine"])
        let plan = try MergePlanner.plan(
            onePage(table, deletes: [pending.rowKey.columns]), tables: PlannerTables.byName, owner: owner,
            outbox: [pending])
        // A new row: the server's constant defaults under the pending write.
        let expected: FerryRow = ["id": "t", "user_id": .string(owner), "title": "mine", "position": 0]
        #expect(plan.rows == [.put(table: "tasks", row: expected)])
        #expect(plan.shadows == [.set(pending.rowKey, row: nil)])
    }

    @Test func insertOnlyAPendingInsertStaysVisibleUntilTheServerAnswers() throws {
        let table = PlannerTables.gameRecords
        let server = PlannerTables.serverRow(table, key: "g", ["seconds": 300])
        let pending = try mutation(1, .insert, table, key: "g", ["seconds": 312])
        let plan = try MergePlanner.plan(
            onePage(table, upserts: [server]), tables: PlannerTables.byName, owner: owner, outbox: [pending])
        // The server will answer `immutable` (then revert puts `server` back); until then the device's write shows.
        #expect(plan.rows == [.put(table: "game_records", row: server.merging(["seconds": 312]) { _, mine in mine })])
        #expect(
            MergePlanner.revert(pending.rowKey, shadow: server, remaining: [], in: table, owner: owner)
                == .put(table: "game_records", row: server))
    }

    @Test func setAPendingDeleteOfAMemberHoldsAgainstThePulledMembership() throws {
        let table = PlannerTables.achievements
        let member = PlannerTables.serverRow(table, key: "a-1")
        let leave = try mutation(1, .delete, table, key: "a-1")
        let plan = try MergePlanner.plan(
            onePage(table, upserts: [member]), tables: PlannerTables.byName, owner: owner, outbox: [leave])
        #expect(plan.rows == [.remove(table: "achievements", key: leave.rowKey.columns)])
    }

    @Test func setAPendingInsertHoldsAgainstAPulledDelete() throws {
        let table = PlannerTables.achievements
        let join = try mutation(1, .insert, table, key: "a-1")
        let plan = try MergePlanner.plan(
            onePage(table, deletes: [join.rowKey.columns]), tables: PlannerTables.byName, owner: owner, outbox: [join])
        #expect(plan.rows == [.put(table: "achievements", row: PlannerTables.serverRow(table, key: "a-1"))])
    }

    @Test func deviceLockThePendingWriteOfTheHolderStaysOnTop() throws {
        let table = PlannerTables.activeGame
        let server = PlannerTables.serverRow(table, key: "current", ["hints": 1, "notes": ["a": 1]])
        let pending = try mutation(1, .upsert, table, key: "current", ["hints": 4])
        let plan = try MergePlanner.plan(
            onePage(table, upserts: [server]), tables: PlannerTables.byName, owner: owner, outbox: [pending])
        #expect(plan.rows == [.put(table: "active_game", row: server.merging(["hints": 4]) { _, mine in mine })])
    }

    @Test(arguments: [PlannerTables.subscriptions, PlannerTables.dailyPuzzles])
    func readOnlyTablesTakeThePageWhateverElseIsPending(_ table: TableSchema) throws {
        let row = PlannerTables.serverRow(table, key: "k")
        let other = try mutation(7, .upsert, PlannerTables.tasks, key: "t", ["title": "x"])
        let plan = try MergePlanner.plan(
            onePage(table, upserts: [row]), tables: PlannerTables.byName, owner: owner, outbox: [other])
        #expect(plan.rows == [.put(table: table.name, row: row)])
        #expect(plan.shadows.isEmpty)
    }

    // MARK: - Every ordering of pending writes

    /// Three writes of one row, pending in each of the six orders over a pulled row: a
    /// delete clears the row, an upsert writes its columns over what is there (a new row
    /// starting from the defaults), and the last write decides.
    @Test(arguments: permutations([0, 1, 2]))
    func everyOrderOfPendingWritesEndsAsItsLastWritesSay(_ order: [Int]) throws {
        let table = PlannerTables.tasks
        let writes: [(FerryOperation, FerryRow)] = [
            (.upsert, ["title": "mine"]), (.upsert, ["position": 5.0]), (.delete, [:]),
        ]
        let outbox = try order.enumerated().map { index, write in
            try mutation(Int64(index + 1), writes[write].0, table, key: "t", writes[write].1)
        }
        let server = PlannerTables.serverRow(table, key: "t", ["title": "theirs", "position": 1.0])
        // The spec, written out: start from the server's row; after a delete, from nothing.
        var expected: FerryRow? = server
        for write in order {
            switch writes[write].0 {
            case .delete: expected = nil
            default:
                expected = (expected ?? ["id": "t", "user_id": .string(owner), "title": "", "position": 0])
                    .merging(writes[write].1) { _, mine in mine }
            }
        }
        let plan = try MergePlanner.plan(
            onePage(table, upserts: [server]), tables: PlannerTables.byName, owner: owner, outbox: outbox.shuffled())
        let key = outbox[0].rowKey
        #expect(
            plan.rows == [expected.map { .put(table: "tasks", row: $0) } ?? .remove(table: "tasks", key: key.columns)])
        #expect(plan.shadows == [.set(key, row: server)])
    }

    /// Pending writes 1...3, with the page's `last_mutation_id` at each point among them:
    /// those it covers are in the server's row already and leave; only the rest go on top.
    @Test(arguments: 0...3)
    func thePageAcknowledgesThePendingWritesUpToItsLastMutationID(_ last: Int) throws {
        let table = PlannerTables.tasks
        let outbox = try (1...3).map { try mutation(Int64($0), .upsert, table, key: "t", ["title": .string("v\($0)")]) }
        let server = PlannerTables.serverRow(table, key: "t", ["title": .string(last == 0 ? "theirs" : "v\(last)")])
        let plan = try MergePlanner.plan(
            onePage(table, upserts: [server], lastMutationID: Int64(last)), tables: PlannerTables.byName, owner: owner,
            outbox: outbox.reversed())
        let key = outbox[0].rowKey
        if last == 3 {
            #expect(plan.rows == [.put(table: "tasks", row: server)])
            #expect(plan.shadows == [.drop(key)])
        } else {
            #expect(plan.rows == [.put(table: "tasks", row: server.merging(["title": "v3"]) { _, mine in mine })])
            #expect(plan.shadows == [.set(key, row: server)])
        }
    }

    @Test func anAcknowledgedRowNotInThePageLosesItsShadowOnlyWhenNothingElseIsPending() throws {
        let table = PlannerTables.tasks
        let settled = try mutation(1, .upsert, table, key: "a", ["title": "x"])
        let acknowledged = try mutation(2, .upsert, table, key: "b", ["title": "x"])
        let stillPending = try mutation(3, .upsert, table, key: "b", ["title": "y"])
        let page = PullPage(changes: [:], cursor: "c", hasMore: false, lastMutationID: 2)
        let plan = try MergePlanner.plan(
            page, tables: PlannerTables.byName, owner: owner, outbox: [stillPending, acknowledged, settled])
        #expect(plan.rows.isEmpty)
        #expect(plan.shadows == [.drop(settled.rowKey)])
    }

    // MARK: - Rejections and replays

    @Test func aRejectedWriteRevertsToTheShadowWithTheOtherPendingWritesOnTop() throws {
        let table = PlannerTables.tasks
        let shadow = PlannerTables.serverRow(table, key: "t", ["title": "server", "position": 1.0])
        let remaining = try mutation(2, .upsert, table, key: "t", ["position": 5.0])
        #expect(
            MergePlanner.revert(remaining.rowKey, shadow: shadow, remaining: [remaining], in: table, owner: owner)
                == .put(table: "tasks", row: shadow.merging(["position": 5.0]) { _, mine in mine }))
    }

    @Test func aRejectedInsertOfARowTheServerHasNotRemovesIt() throws {
        let table = PlannerTables.gameRecords
        let key = try mutation(1, .insert, table, key: "g").rowKey
        #expect(
            MergePlanner.revert(key, shadow: nil, remaining: [], in: table, owner: owner)
                == .remove(table: "game_records", key: key.columns))
    }

    @Test func aNewRowShowsTheServersConstantDefaultsAndTheOwner() throws {
        let table = PlannerTables.activeGame
        let write = try mutation(1, .upsert, table, key: "current", ["hints": 2])
        #expect(
            MergePlanner.replay([write], onto: nil, in: table, owner: owner)
                == ["user_id": .string(owner), "slot": "current", "hints": 2, "notes": [:]])
    }

    @Test func aColumnTheLocalTableLacksIsLeftToTheServer() throws {
        let table = PlannerTables.tasks
        let write = try mutation(1, .upsert, table, key: "t", ["title": "x", "unknown": 1])
        #expect(MergePlanner.replay([write], onto: nil, in: table, owner: owner)?["unknown"] == nil)
    }
}

/// Every order of `items`.
func permutations<T>(_ items: [T]) -> [[T]] {
    guard items.count > 1 else { return [items] }
    return items.indices.flatMap { index in
        var rest = items
        let first = rest.remove(at: index)
        return permutations(rest).map { [first] + $0 }
    }
}

@Suite(.tagSelection) struct PullPageTests {
    @Test func aPullAnswerDecodesWithItsRowsAsTheyWereParsed() throws {
        let json = try JSONValue(
            json: Data(
                #"{"changes": {"tasks": {"upserts": [{"id": "t", "n": 1, "x": {"a": [true]}}], "deletes": [{"id": "u"}]}}, "cursor": "c", "has_more": true, "last_mutation_id": 7}"#
                    .utf8))
        let page = try PullPage(json: json)
        #expect(page.changes["tasks"]?.upserts == [["id": "t", "n": 1, "x": ["a": [true]]]])
        #expect(page.changes["tasks"]?.deletes == [["id": "u"]])
        #expect(page.cursor == "c" && page.hasMore && page.lastMutationID == 7)
        #expect(throws: (any Error).self) { try PullPage(json: ["changes": [:], "has_more": false]) }
    }
}
