import FerryTestSupport
import Foundation
import Testing

/// A shared table written at an origin cluster reaches two subscriber clusters (shards) by
/// logical replication, and their devices hear of it and pull it as if it were written
/// there: the rows arrive stamped by the subscriber, cue its streams, tombstone and purge
/// as at the origin, and cursors stay right (docs/SCALING.md, "Shared tables across shards").
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct SharedReplicationTests {
    static func grid(_ digit: Int) -> String { String(repeating: String(digit), count: 81) }

    @Test func anOriginsWritesReachEveryShardStampedCuedAndPulled() async throws {
        try await SharedTablesReplication.with(subscribers: 2) { replication in
            let origin = replication.origin
            // Empty at first everywhere; a row inserted at the origin reaches both shards.
            try await replication.eventuallyEverywhere("select count(*) from public.daily_puzzles", is: "0")
            try await origin.sql(
                "insert into public.daily_puzzles (day, grid) values ('2026-01-01', '\(Self.grid(1))')")
            try await replication.eventuallyEverywhere(
                "select grid from public.daily_puzzles where day = '2026-01-01'", is: Self.grid(1))

            let subscriber = replication.subscribers[0]
            try await AccountsDatabase.with { database in
                // Without the gateway's memory of shared changes: this checks which cursors a
                // purge expires, exactly, and a pull answered from memory leaves the cursor's
                // own tables where they were, which the purge below (retention 0) then expires
                // too (docs/ARCHITECTURE.md, "Shared-change storms").
                try await withStartedGateway(
                    databaseURL: subscriber.url(database: "ferry", user: "ferry_gateway"),
                    arguments: ["--shared-pull-cache", "off"]
                ) { gateway, port in
                    let shard = AccountsGateway(database: database, gateway: gateway, port: port)
                    let device = try await shard.signUpAnonymous()
                    let first = try await shard.pull(device)
                    #expect(first.upserts("daily_puzzles").map { $0["grid"] as? String } == [Self.grid(1)])
                    var cursor = try #require(first.cursor)

                    for transport in StreamTestClient.Transport.allCases {
                        let stream = try await shard.openStream(device, transport)
                        defer { stream.close() }
                        _ = try await stream.nextMessageAsync(ofType: "hello")

                        // An insert and an update in one origin transaction: one cue, one pull.
                        let day = transport == .webSocket ? "2026-01-02" : "2026-01-03"
                        try await origin.sql(
                            "begin; insert into public.daily_puzzles (day, grid) values ('\(day)', '\(Self.grid(2))');"
                                + " update public.daily_puzzles set grid = '\(Self.grid(3))' where day = '2026-01-01';"
                                + " commit")
                        let cue = try await stream.nextMessageAsync(ofType: "cue")
                        #expect(cue.strings("tables") == ["daily_puzzles"], "\(transport)")
                        let next = try await shard.pull(device, cursor: cursor)
                        #expect(
                            Set(next.upserts("daily_puzzles").compactMap { $0["day"] as? String })
                                == ["2026-01-01", day], "\(transport)")
                        cursor = try #require(next.cursor)
                    }

                    // A delete at the origin is a tombstone there, pulled here as a delete.
                    let beforeDelete = cursor
                    let stream = try await shard.openStream(device, .serverSentEvents)
                    defer { stream.close() }
                    _ = try await stream.nextMessageAsync(ofType: "hello")
                    try await origin.sql("delete from public.daily_puzzles where day = '2026-01-02'")
                    _ = try await stream.nextMessageAsync(ofType: "cue")
                    let deleted = try await shard.pull(device, cursor: cursor)
                    #expect(deleted.deletes("daily_puzzles").map { $0["day"] as? String } == ["2026-01-02"])
                    cursor = try #require(deleted.cursor)

                    // The origin purges the tombstone: gone here too, and a cursor that had not
                    // seen it expires rather than keep the row; one that had goes on.
                    try await origin.sql("select ferry.purge_tombstones('0', 100)")
                    try await replication.eventuallyEverywhere(
                        "select count(*) from public.daily_puzzles where day = '2026-01-02'", is: "0")
                    let stale = try await shard.pull(device, cursor: beforeDelete)
                    #expect(stale.status == 409 && stale.response.code == "cursor_expired", "\(stale.response)")
                    let fresh = try await shard.pull(device, cursor: cursor)
                    #expect(fresh.status == 200 && fresh.rowCount == 0, "\(fresh.response)")

                    // The same key again at the origin, after its purge, arrives.
                    try await origin.sql(
                        "insert into public.daily_puzzles (day, grid) values ('2026-01-02', '\(Self.grid(4))')")
                    _ = try await stream.nextMessageAsync(ofType: "cue")
                    let again = try await shard.pull(device, cursor: cursor)
                    #expect(again.upserts("daily_puzzles").map { $0["grid"] as? String } == [Self.grid(4)])
                }
            }

            // Both shards hold what the origin holds.
            let rows =
                "select string_agg(day || ':' || grid || ':' || _deleted, ',' order by day) from public.daily_puzzles"
            let expected = try await origin.value(rows)
            try await replication.eventuallyEverywhere(rows, is: expected)

            // Nobody but replication writes a received table.
            await #expect(throws: (any Error).self) {
                try await subscriber.sql("update public.daily_puzzles set grid = '\(Self.grid(5))'")
            }
            #expect(
                try await subscriber.value("select count(*) from public.daily_puzzles where grid = '\(Self.grid(5))'")
                    == "0")
        }
    }
}
