import FerryTestSupport
import Foundation
import Testing

@testable import FerryClient

/// A client in this process on `device` of `gateway`, reaching it through `proxy`,
/// syncing only when asked; the rejections it reports are collected in `rejected`.
func proxiedClient(
    _ gateway: DemoGateway, through proxy: AnswerLosingProxy, _ device: String,
    rejected: Shared<[RejectedMutation]> = Shared([])
) async throws -> FerryClient {
    let ferry = try await client(gateway, device, automatic: false, stream: false, server: proxy.url)
    let events = ferry.events()
    Task {
        for await event in events {
            if case .mutationRejected(let mutation) = event { rejected.withLock { $0.append(mutation) } }
        }
    }
    return ferry
}

/// Every row of `table` the device holds, each column as JSON text, against the
/// server's live rows of `user`, column by column (the columns the device mirrors).
private func expectConverged(
    _ ferry: FerryClient, _ gateway: DemoGateway, _ table: String, of user: String,
    sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    let columns = try #require(ferry.tables[table]).columns.map(\.name)
    let local = try ferry.rows(in: table).map { row in columns.map { row[$0]?.jsonText ?? "null" } }
    let server = try await gateway.rows(
        "select \(columns.map { "coalesce((to_jsonb(t) -> '\($0)')::text, 'null')" }.joined(separator: ", ")) "
            + "from public.\(table) t where user_id = $1 and not _deleted order by id", [user]
    ).map { $0.map { $0 ?? "null" } }
    // Numbers compare as numbers (a double column's 0 is pulled as 0, read back as 0.0).
    let normalized = { (rows: [[String]]) in
        rows.map {
            $0.map { text -> String in
                switch try? JSONValue(json: Data(text.utf8)) {
                case .integer(let number)?: "\(Double(number))"
                case .double(let number)?: "\(number)"
                case let value?: value.jsonText
                case nil: text
                }
            }
        }
    }
    #expect(
        normalized(local) == normalized(server), "\(table): the device and the server differ",
        sourceLocation: sourceLocation)
}

/// A push whose answer is lost after the server committed it (a proxy drops the
/// connection once the answer starts): the retry is answered `duplicate` with the
/// mutation's original outcome, and the device ends with the server's rows, row by row.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct LostPushAnswerTests {
    /// A rejected insert and an applied one in one batch, the answer lost: the device
    /// puts the rejected row back to the server's version, keeps the applied one, and
    /// reports the rejection, whatever then learns of the outcome (the pull that follows
    /// the failed push, or the next push's duplicate).
    @Test func aRejectionWhoseAnswerIsLostIsStillUndoneAndReported() async throws {
        try await DemoGateway.with { gateway in
            let proxy = try AnswerLosingProxy(to: gateway.port)
            defer { proxy.stop() }
            let rejected = Shared<[RejectedMutation]>([])
            let ferry = try await proxiedClient(gateway, through: proxy, gateway.device("phone"), rejected: rejected)
            let user = try #require(ferry.user?.id)
            let record = { (id: String, seconds: Int) -> FerryRow in
                [
                    "id": .string(id), "puzzle_id": "p-1", "seconds": .integer(Int64(seconds)),
                    "finished_at": "2026-05-01T09:30:00Z",
                ]
            }
            try ferry.enqueue(.insert, into: "game_records", record("g-1", 10))
            try await ferry.sync()

            // g-1 again with other values (immutable: rejected), and a new g-2 (applied).
            try ferry.enqueue(.insert, into: "game_records", record("g-1", 99))
            try ferry.enqueue(.insert, into: "game_records", record("g-2", 20))
            proxy.loseAnswers(to: "POST /v1/push")
            try? await ferry.sync()
            #expect(proxy.answersLost == 1)
            try await ferry.sync()
            try await ferry.sync()

            #expect(ferry.status.pendingMutations == 0)
            #expect(try await serverIDs(gateway, "game_records", of: user) == ["g-1", "g-2"])
            let seconds = try ferry.rows(in: "game_records").map { $0["seconds"] }
            #expect(seconds == [.integer(10), .integer(20)], "the rejected row is the server's again")
            try await eventually("the rejection reported", seconds: 10) {
                rejected.withLock { $0.map(\.code) } == ["immutable"]
            }
            try await expectConverged(ferry, gateway, "game_records", of: user)

            // A later rejection of the same row, answered as usual, reverts to the
            // server's version too: the version kept for it was not the lost one's row.
            try ferry.enqueue(.insert, into: "game_records", record("g-1", 77))
            try await ferry.sync()
            #expect(try ferry.rows(in: "game_records").first?["seconds"] == .integer(10))
            try await eventually("the second rejection reported", seconds: 10) {
                rejected.withLock { $0.map(\.code) } == ["immutable", "immutable"]
            }
            try await expectConverged(ferry, gateway, "game_records", of: user)
            await ferry.close()
        }
    }

    /// An applied upsert whose answer is lost, answered `duplicate` (original: applied)
    /// by the retry: the device keeps its write, reports nothing, and matches the server.
    @Test func anAppliedWriteWhoseAnswerIsLostStays() async throws {
        try await DemoGateway.with { gateway in
            let proxy = try AnswerLosingProxy(to: gateway.port)
            defer { proxy.stop() }
            let rejected = Shared<[RejectedMutation]>([])
            let ferry = try await proxiedClient(gateway, through: proxy, gateway.device("laptop"), rejected: rejected)
            let user = try #require(ferry.user?.id)
            try ferry.enqueue(.upsert, into: "tasks", ["id": "t-1", "title": "first"])
            try await ferry.sync()
            try ferry.enqueue(.upsert, into: "tasks", ["id": "t-1", "title": "renamed"])
            try ferry.enqueue(.upsert, into: "tasks", ["id": "t-2", "title": "new"])
            proxy.loseAnswers(to: "POST /v1/push")
            try? await ferry.sync()
            #expect(proxy.answersLost == 1)
            try await ferry.sync()
            try await ferry.sync()

            #expect(ferry.status.pendingMutations == 0)
            #expect(try ferry.rows(in: "tasks").map { $0["title"] } == ["renamed", "new"])
            #expect(rejected.withLock { $0.isEmpty })
            try await expectConverged(ferry, gateway, "tasks", of: user)
            await ferry.close()
        }
    }

    /// Several devices, each losing the answers of pushes that mix applied and rejected
    /// mutations, then synced until quiet: every device holds exactly the server's rows.
    @Test func devicesLosingAnswersConvergeWithTheServer() async throws {
        try await DemoGateway.with { gateway in
            let proxy = try AnswerLosingProxy(to: gateway.port)
            defer { proxy.stop() }
            for device in ["a", "b", "c"] {
                let rejected = Shared<[RejectedMutation]>([])
                let ferry = try await proxiedClient(gateway, through: proxy, gateway.device(device), rejected: rejected)
                let user = try #require(ferry.user?.id)
                for round in 0..<3 {
                    for index in 0..<4 {
                        // Every second record is one the server already has with other values.
                        let id = "g-\(index % 2 == 0 ? round : 0)-\(index)"
                        try ferry.enqueue(
                            .insert, into: "game_records",
                            [
                                "id": .string(id), "puzzle_id": "p", "seconds": .integer(Int64(round * 10 + index)),
                                "finished_at": "2026-05-01T09:30:00Z",
                            ])
                        try ferry.enqueue(
                            .upsert, into: "tasks", ["id": .string("t-\(index)"), "title": .string("r\(round)")])
                    }
                    if round < 2 { proxy.loseAnswers(to: "POST /v1/push") }
                    try? await ferry.sync()
                }
                try await ferry.sync()
                try await ferry.sync()
                #expect(ferry.status.pendingMutations == 0, "\(device)")
                try await expectConverged(ferry, gateway, "game_records", of: user)
                try await expectConverged(ferry, gateway, "tasks", of: user)
                await ferry.close()
            }
            #expect(proxy.answersLost == 6)
        }
    }
}
