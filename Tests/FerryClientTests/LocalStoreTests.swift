import FerryTestSupport
import Foundation
import Synchronization
import Testing

@testable import FerryClient

/// The tasks example's table as `GET /v1/schema` lists it.
let tasksSchema = TableSchema(
    name: "tasks", strategy: .lww, key: ["user_id", "id"], owner: "user_id",
    columns: [
        .init(name: "id", type: "text"), .init(name: "user_id", type: "uuid"), .init(name: "parent_id", type: "text"),
        .init(name: "title", type: "text"), .init(name: "position", type: "double precision"),
        .init(name: "metadata", type: "jsonb"), .init(name: "updated_at", type: "timestamp with time zone"),
    ])

let owner = "6f9d3c1e-0000-4000-8000-000000000001"

/// A store for `owner` with the tasks table, and the change sets its observer heard.
func withStore(_ body: (LocalStore, Shared<[Set<String>]>) async throws -> Void) async throws {
    try await withTemporaryDirectory { (directory) async throws -> Void in
        let heard = Shared<[Set<String>]>([])
        let store = try LocalStore(path: directory.appendingPathComponent("s.sqlite").path, userID: owner) { tables in
            heard.withLock { $0.append(tables) }
        }
        try store.apply(schema: [tasksSchema])
        heard.withLock { $0.removeAll() }
        return try await body(store, heard)
    }
}

func page(
    _ upserts: [FerryRow], deletes: [FerryRow] = [], table: String = "tasks", cursor: String, lastMutationID: Int64 = 0
) -> PullPage {
    PullPage(
        changes: [table: PullPage.TableChanges(upserts: upserts, deletes: deletes)], cursor: cursor, hasMore: false,
        lastMutationID: lastMutationID)
}

extension LocalStore {
    /// Settles the outbox's mutations `acknowledged` (applied) and `rejected`, by id.
    func settle(acknowledged: [Int64], rejected: [Int64]) throws {
        let queued = Dictionary(
            uniqueKeysWithValues: try pendingBatch(limit: 10_000, maxBytes: 1 << 30).map { ($0.id, $0) })
        try settle(applied: acknowledged.compactMap { queued[$0] }, rejected: rejected.compactMap { queued[$0] })
    }
}

@Suite(.tagSelection) struct LocalStoreTests {
    @Test func enqueueWritesTheRowAndTheMutationTogether() async throws {
        try await withStore { (store, heard) async throws -> Void in
            let row = try store.enqueue(
                .upsert, into: "tasks", ["id": "t-1", "title": "milk", "metadata": ["due": "x"]])
            #expect(row["user_id"] == .string(owner))
            #expect(row["metadata"] == ["due": "x"])
            #expect(store.pendingCount == 1)
            let batch = try store.pendingBatch(limit: 10, maxBytes: 1 << 20)
            #expect(batch.map(\.id) == [1])
            #expect(batch[0].pushJSON["row"]?["title"] == "milk")
            #expect(heard.withLock { $0 } == [["tasks"]])
        }
    }

    @Test func mutationIDsKeepGrowingAcrossReopensAndAnEmptiedOutbox() async throws {
        try await withTemporaryDirectory { (directory) async throws -> Void in
            let path = directory.appendingPathComponent("s.sqlite").path
            do {
                let store = try LocalStore(path: path, userID: owner) { _ in }
                try store.apply(schema: [tasksSchema])
                try store.enqueue(.upsert, into: "tasks", ["id": "a"])
                try store.enqueue(.upsert, into: "tasks", ["id": "b"])
                try store.settle(acknowledged: [1, 2], rejected: [])
                #expect(store.pendingCount == 0)
            }
            let reopened = try LocalStore(path: path, userID: owner) { _ in }
            try reopened.enqueue(.upsert, into: "tasks", ["id": "c"])
            #expect(try reopened.pendingBatch(limit: 10, maxBytes: 1 << 20).map(\.id) == [3])
        }
    }

    @Test func theLastMutationsIDIsNotTakenAgainWhenItLeavesBeforeEarlierOnes() async throws {
        try await withStore { (store, _) async throws -> Void in
            try store.enqueue(.upsert, into: "tasks", ["id": "a"])
            try store.enqueue(.upsert, into: "tasks", ["id": "b"])
            try store.settle(acknowledged: [2], rejected: [])
            try store.enqueue(.upsert, into: "tasks", ["id": "c"])
            #expect(try store.pendingBatch(limit: 10, maxBytes: 1 << 20).map(\.id) == [1, 3])
        }
    }

    @Test func aPullRaisesTheNextMutationIDPastTheServersLast() async throws {
        try await withStore { (store, _) async throws -> Void in
            #expect(try store.merge(page([], cursor: "c1", lastMutationID: 41), startedFrom: nil, syncedAt: Date()))
            try store.enqueue(.upsert, into: "tasks", ["id": "a"])
            #expect(try store.pendingBatch(limit: 10, maxBytes: 1 << 20).map(\.id) == [42])
        }
    }

    @Test func aPullNeverOverwritesAPendingWrite() async throws {
        try await withStore { (store, _) async throws -> Void in
            try store.enqueue(.upsert, into: "tasks", ["id": "t", "title": "mine"])
            let server: FerryRow = ["id": "t", "user_id": .string(owner), "title": "theirs", "position": 2.0]
            #expect(try store.merge(page([server], cursor: "c1"), startedFrom: nil, syncedAt: Date()))
            let row = try store.rows(in: "tasks")[0]
            #expect(row["title"] == "mine")
            #expect(row["position"] == .double(2))
            // Once the server has the write (last_mutation_id), the pull's version stands.
            let after: FerryRow = ["id": "t", "user_id": .string(owner), "title": "mine", "position": 2.0]
            #expect(
                try store.merge(page([after], cursor: "c2", lastMutationID: 1), startedFrom: "c1", syncedAt: Date()))
            #expect(store.pendingCount == 0)
        }
    }

    @Test func aPendingDeleteStaysDeletedThroughAPull() async throws {
        try await withStore { (store, _) async throws -> Void in
            let server: FerryRow = ["id": "t", "user_id": .string(owner), "title": "x"]
            #expect(try store.merge(page([server], cursor: "c1"), startedFrom: nil, syncedAt: Date()))
            try store.enqueue(.delete, into: "tasks", ["id": "t"])
            #expect(try store.merge(page([server], cursor: "c2"), startedFrom: "c1", syncedAt: Date()))
            #expect(try store.rows(in: "tasks").isEmpty)
        }
    }

    @Test func aPageFromAStaleCursorIsDropped() async throws {
        try await withStore { (store, _) async throws -> Void in
            #expect(try store.merge(page([], cursor: "c1"), startedFrom: nil, syncedAt: Date()))
            let row: FerryRow = ["id": "t", "user_id": .string(owner), "title": "x"]
            #expect(try store.merge(page([row], cursor: "c2"), startedFrom: nil, syncedAt: Date()) == false)
            #expect(try store.rows(in: "tasks").isEmpty)
            #expect(store.cursor == "c1")
        }
    }

    @Test func aRejectedWriteRevertsToTheServersRowWithOtherPendingWritesOnTop() async throws {
        try await withStore { (store, _) async throws -> Void in
            let server: FerryRow = ["id": "t", "user_id": .string(owner), "title": "server", "position": 1.0]
            #expect(try store.merge(page([server], cursor: "c1"), startedFrom: nil, syncedAt: Date()))
            try store.enqueue(.upsert, into: "tasks", ["id": "t", "title": "bad"])
            try store.enqueue(.upsert, into: "tasks", ["id": "t", "position": 5.0])
            try store.settle(acknowledged: [], rejected: [1])
            let row = try store.rows(in: "tasks")[0]
            #expect(row["title"] == "server")
            #expect(row["position"] == .double(5))
            #expect(store.pendingCount == 1)
        }
    }

    /// One rejection in a batch undoes its own row only: the applied rows keep their writes.
    @Test func aRejectionInABatchLeavesItsAppliedRowsAsWritten() async throws {
        try await withStore { (store, _) async throws -> Void in
            let server: FerryRow = ["id": "p", "user_id": .string(owner), "title": "old", "position": 1.0]
            #expect(try store.merge(page([server], cursor: "c1"), startedFrom: nil, syncedAt: Date()))
            try store.enqueue(.insert, into: "tasks", ["id": "new"])
            try store.enqueue(.upsert, into: "tasks", ["id": "p", "title": "renamed"])
            try store.enqueue(.insert, into: "tasks", ["id": "bad"])
            try store.settle(acknowledged: [1, 2], rejected: [3])
            let rows = try store.rows(in: "tasks")
            #expect(rows.map { $0["id"] } == ["new", "p"])
            #expect(rows.last?["title"] == "renamed")
            #expect(store.pendingCount == 0)
        }
    }

    /// The version a rejection puts a row back to has the row's applied writes in it.
    @Test func aRejectionAfterAnAppliedWriteRevertsToTheAppliedVersion() async throws {
        try await withStore { (store, _) async throws -> Void in
            let server: FerryRow = ["id": "t", "user_id": .string(owner), "title": "server", "position": 1.0]
            #expect(try store.merge(page([server], cursor: "c1"), startedFrom: nil, syncedAt: Date()))
            try store.enqueue(.upsert, into: "tasks", ["id": "t", "title": "applied"])
            try store.enqueue(.upsert, into: "tasks", ["id": "t", "position": 9.0])
            try store.enqueue(.upsert, into: "tasks", ["id": "t", "parent_id": "p"])
            try store.settle(acknowledged: [1], rejected: [])
            try store.settle(acknowledged: [], rejected: [2])
            let row = try store.rows(in: "tasks")[0]
            #expect(row["title"] == "applied")
            #expect(row["position"] == .double(1))
            #expect(row["parent_id"] == "p")
            try store.settle(acknowledged: [], rejected: [3])
            #expect(try store.rows(in: "tasks")[0]["parent_id"] == .null)
        }
    }

    /// A pull whose last_mutation_id covers a mutation but brings no version of its row
    /// (the server may have rejected it: the push answer was lost) leaves it queued, for
    /// the next push's duplicate to settle; one whose row it brings leaves the outbox.
    @Test func aPullKeepsACoveredMutationWhoseRowItDoesNotBring() async throws {
        try await withStore { (store, _) async throws -> Void in
            try store.enqueue(.insert, into: "tasks", ["id": "kept"])
            try store.enqueue(.insert, into: "tasks", ["id": "brought", "title": "mine"])
            let brought: FerryRow = ["id": "brought", "user_id": .string(owner), "title": "mine"]
            #expect(
                try store.merge(page([brought], cursor: "c1", lastMutationID: 2), startedFrom: nil, syncedAt: Date()))
            #expect(try store.pendingBatch(limit: 10, maxBytes: 1 << 20).map(\.id) == [1])
            #expect(store.hasPending(through: 2))
            try store.settle(acknowledged: [], rejected: [1])
            #expect(try store.rows(in: "tasks").map { $0["id"] } == ["brought"])
            #expect(!store.hasPending(through: 2))
        }
    }

    @Test func aRejectedInsertOfANewRowRemovesIt() async throws {
        try await withStore { (store, _) async throws -> Void in
            try store.enqueue(.insert, into: "tasks", ["id": "root"])
            try store.settle(acknowledged: [], rejected: [1])
            #expect(try store.rows(in: "tasks").isEmpty)
        }
    }

    @Test func aPendingWriteFromAnotherProcessKeepsTheServersRowAsTheShadow() async throws {
        try await withTemporaryDirectory { (directory) async throws -> Void in
            let path = directory.appendingPathComponent("s.sqlite").path
            let app = try LocalStore(path: path, userID: owner) { _ in }
            try app.apply(schema: [tasksSchema])
            let server: FerryRow = ["id": "t", "user_id": .string(owner), "title": "server", "position": 1.0]
            #expect(try app.merge(page([server], cursor: "c1"), startedFrom: nil, syncedAt: Date()))
            // Another process on the same file (an extension, a ferry-demo run) writes first.
            let other = try LocalStore(path: path, userID: owner) { _ in }
            try other.enqueue(.upsert, into: "tasks", ["id": "t", "title": "bad"])
            try app.enqueue(.upsert, into: "tasks", ["id": "t", "position": 5.0])
            try app.settle(acknowledged: [], rejected: [1])
            let row = try app.rows(in: "tasks")[0]
            #expect(row["title"] == "server")
            #expect(row["position"] == .double(5))
        }
    }

    /// Two processes on one file push the same batch: one hears `rejected`, the other
    /// `duplicate` with `original: rejected`. Whichever settles first puts the row back;
    /// the other finds the mutation gone and leaves the row as the first left it.
    @Test func twoProcessesHearingOneRejectionPutTheRowBackOnce() async throws {
        try await withTemporaryDirectory { (directory) async throws -> Void in
            let path = directory.appendingPathComponent("s.sqlite").path
            let app = try LocalStore(path: path, userID: owner) { _ in }
            try app.apply(schema: [tasksSchema])
            let server: FerryRow = ["id": "t", "user_id": .string(owner), "title": "server"]
            #expect(try app.merge(page([server], cursor: "c1"), startedFrom: nil, syncedAt: Date()))
            let other = try LocalStore(path: path, userID: owner) { _ in }
            try app.enqueue(.upsert, into: "tasks", ["id": "t", "title": "bad"])
            let batch = try app.pendingBatch(limit: 10, maxBytes: 1 << 20)
            try other.settle(applied: [], rejected: batch)
            try app.enqueue(.upsert, into: "tasks", ["id": "t", "position": 2.0])
            try app.settle(applied: [], rejected: batch)
            let row = try app.rows(in: "tasks")[0]
            #expect(row["title"] == "server")
            #expect(row["position"] == .double(2), "the later pending write stays")
            #expect(app.pendingCount == 1)
        }
    }

    @Test func observersHearAMergeOfManyRowsOnce() async throws {
        try await withStore { (store, heard) async throws -> Void in
            let rows: [FerryRow] = (0..<500).map { ["id": .string("t\($0)"), "user_id": .string(owner)] }
            #expect(try store.merge(page(rows, cursor: "c1"), startedFrom: nil, syncedAt: Date()))
            #expect(heard.withLock { $0 } == [["tasks"]])
            #expect(try store.rows(in: "tasks").count == 500)
        }
    }

    @Test func cursorExpiredWipeKeepsTheOutboxAndItsRows() async throws {
        try await withStore { (store, _) async throws -> Void in
            let server: FerryRow = ["id": "old", "user_id": .string(owner)]
            #expect(try store.merge(page([server], cursor: "c1"), startedFrom: nil, syncedAt: Date()))
            try store.enqueue(.upsert, into: "tasks", ["id": "mine"])
            try store.wipeSyncedTables()
            #expect(store.cursor == nil)
            #expect(try store.rows(in: "tasks").map { $0["id"] } == ["mine"])
            #expect(store.pendingCount == 1)
        }
    }

    @Test func writesToUnknownOrReadOnlyTablesAreRefused() async throws {
        try await withStore { (store, _) async throws -> Void in
            #expect(throws: LocalStoreError.unknownTable("nope")) {
                try store.enqueue(.upsert, into: "nope", ["id": "x"])
            }
            var shared = tasksSchema
            shared.name = "daily"
            shared.strategy = .shared
            try store.apply(schema: [tasksSchema, shared])
            #expect(throws: LocalStoreError.readOnlyTable("daily")) {
                try store.enqueue(.upsert, into: "daily", ["id": "x"])
            }
            #expect(throws: LocalStoreError.missingKey(table: "tasks", column: "id")) {
                try store.enqueue(.upsert, into: "tasks", ["title": "x"])
            }
        }
    }

    @Test func batchesStayWithinTheByteBudget() async throws {
        try await withStore { (store, _) async throws -> Void in
            let title = JSONValue.string(String(repeating: "x", count: 1000))
            for index in 0..<20 {
                try store.enqueue(.upsert, into: "tasks", ["id": .string("t\(index)"), "title": title])
            }
            #expect(try store.pendingBatch(limit: 100, maxBytes: 5000).count == 4)
            #expect(try store.pendingBatch(limit: 3, maxBytes: 1 << 20).count == 3)
            #expect(try store.pendingBatch(limit: 100, maxBytes: 10).count == 1)
        }
    }
}

/// The local writes an enqueue makes, beside the merge's rule (``MergePlanner``), which
/// states the same rule for replays.
@Suite(.tagSelection) struct EnqueueRuleTests {
    func withPlannerStore(_ body: (LocalStore) async throws -> Void) async throws {
        try await withTemporaryDirectory { (directory) async throws -> Void in
            let store = try LocalStore(path: directory.appendingPathComponent("s.sqlite").path, userID: owner) { _ in }
            try store.apply(schema: PlannerTables.all)
            try await body(store)
        }
    }

    /// A value as the local column keeps it (an integer default of a REAL column reads back as a double).
    func stored(_ row: FerryRow, in table: TableSchema) -> FerryRow {
        var result: FerryRow = [:]
        for column in table.columns {
            result[column.name] = column.kind.jsonValue(column.kind.sqlValue(row[column.name] ?? .null))
        }
        return result
    }

    @Test func aNewRowShowsTheServersConstantDefaultsAfterEnqueue() async throws {
        try await withPlannerStore { store in
            let row = try store.enqueue(.upsert, into: "active_game", ["slot": "current", "hints": 2])
            #expect(row == ["user_id": .string(owner), "slot": "current", "hints": 2, "notes": [:]])
            let task = try store.enqueue(.insert, into: "tasks", ["id": "t"])
            #expect(task["title"] == "")
            #expect(task["position"] == .double(0))
            // An upsert of an existing row leaves the columns it does not name as they are.
            try store.enqueue(.upsert, into: "tasks", ["id": "t", "title": "milk"])
            let again = try store.enqueue(.upsert, into: "tasks", ["id": "t", "position": 3])
            #expect(again["title"] == "milk")
        }
    }

    /// Writes in every order through enqueue end as the planner's replay of them says.
    @Test(arguments: permutations([0, 1, 2]))
    func enqueueWritesWhatTheMergeRuleReplays(_ order: [Int]) async throws {
        try await withPlannerStore { store in
            let table = PlannerTables.tasks
            let writes: [(FerryOperation, FerryRow)] = [
                (.upsert, ["id": "t", "title": "mine"]), (.upsert, ["id": "t", "position": 5.0]),
                (.delete, ["id": "t"]),
            ]
            for write in order { try store.enqueue(writes[write].0, into: "tasks", writes[write].1) }
            let replayed = MergePlanner.replay(
                try store.pendingBatch(limit: 10, maxBytes: 1 << 20), onto: nil, in: table, owner: owner)
            #expect(try store.rows(in: "tasks") == (replayed.map { [stored($0, in: table)] } ?? []))
        }
    }

    /// An enqueue's transaction writes its row and its one outbox row, nothing more
    /// (the cost bench/client.sh measures against a bare insert).
    @Test func anEnqueueOfANewRowWritesTwoRows() async throws {
        try await withPlannerStore { store in
            try store.enqueue(.upsert, into: "tasks", ["id": "warm"])
            let before = try store.query("select total_changes() as n", [])
            try store.enqueue(.upsert, into: "tasks", ["id": "t", "title": "x"])
            let after = try store.query("select total_changes() as n", [])
            guard case .integer(let first)? = before.first?["n"], case .integer(let second)? = after.first?["n"] else {
                Issue.record("no total_changes: \(before) \(after)")
                return
            }
            #expect(second - first == 2)
        }
    }
}
