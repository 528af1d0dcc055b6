import FerryTestSupport
import Foundation
import Testing

/// A `readonly` table (the tasks example's `subscriptions`) is written by the operator with
/// SQL, never by clients (docs/TABLES.md; PROTOCOL notes, "Cues": every write cues, whoever
/// makes it). Such a row cues its owner's streams with `origin: null` and comes with the
/// owner's next pull, changed or tombstoned alike; other users get neither.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct ReadonlyTableTests {
    @Test(arguments: StreamTestClient.Transport.allCases)
    func anOperatorsRowsAreCuedToTheirOwnerAndPulled(transport: StreamTestClient.Transport) async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let ana = try await server.signUpAnonymous()
            let bo = try await server.signUpAnonymous()
            let anaLoad = try await server.pull(ana)
            let boLoad = try await server.pull(bo)
            #expect(anaLoad.status == 200 && anaLoad.tables.isEmpty, "\(anaLoad.response)")
            let anaStream = try await server.openStream(ana, transport)
            let boStream = try await server.openStream(bo, transport)
            _ = try await anaStream.nextMessageAsync(ofType: "hello")
            _ = try await boStream.nextMessageAsync(ofType: "hello")

            // The billing hook's SQL, as the table owner.
            try await server.database.admin.execute(
                "insert into public.subscriptions (user_id, plan, renews_at) values ('\(ana.userID)', 'pro', '2027-01-01T00:00:00Z')"
            )
            let cue = try await anaStream.nextMessageAsync(ofType: "cue")
            #expect(cue.strings("tables") == ["subscriptions"] && cue.isNull("origin"), "\(cue)")
            let pulled = try await server.pull(ana, cursor: anaLoad.cursor)
            #expect(pulled.tables == ["subscriptions"], "\(pulled.response)")
            let row = try #require(pulled.upserts("subscriptions").first, "\(pulled.response)")
            #expect(row["user_id"] as? String == ana.userID && row["plan"] as? String == "pro", "\(row)")
            #expect(row["status"] as? String == "active" && row["renews_at"] as? String == "2027-01-01T00:00:00+00:00")

            try await server.database.admin.execute(
                "update public.subscriptions set plan = 'team' where user_id = '\(ana.userID)'")
            #expect(try await anaStream.nextMessageAsync(ofType: "cue").strings("tables") == ["subscriptions"])
            let changed = try await server.pull(ana, cursor: pulled.cursor)
            #expect(changed.upserts("subscriptions").map { $0["plan"] as? String } == ["team"], "\(changed.response)")

            // Deleted the way devices learn of it: a tombstone (a SQL DELETE removes the row for good).
            try await server.database.admin.execute(
                "update public.subscriptions set _deleted = true where user_id = '\(ana.userID)'")
            #expect(try await anaStream.nextMessageAsync(ofType: "cue").strings("tables") == ["subscriptions"])
            let deleted = try await server.pull(ana, cursor: changed.cursor)
            #expect(
                deleted.deletes("subscriptions").map { $0 as NSDictionary } == [
                    ["user_id": ana.userID] as NSDictionary
                ],
                "\(deleted.response)")

            // Bo heard none of it: the first cue Bo's stream gets is one sent to Bo alone.
            try await server.database.admin.execute("select pg_notify('ferry_cue', '\(bo.userID) - for_bo')")
            #expect(try await boStream.nextMessageAsync(ofType: "cue").strings("tables") == ["for_bo"])
            let boNext = try await server.pull(bo, cursor: boLoad.cursor)
            #expect(boNext.status == 200 && boNext.tables.isEmpty, "\(boNext.response)")
            anaStream.close()
            boStream.close()
        }
    }
}
