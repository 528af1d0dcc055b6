import FerryLoop
import FerryPostgres
import FerryTestSupport
import Foundation
import Synchronization
import Testing

@testable import FerryGateway

/// `sql/ferry/functions/cues.sql`: the statement triggers of every synced table send one
/// `pg_notify('ferry_cue', '<owner> <device> <table>')` per distinct owner per statement,
/// received here by a real `LISTEN` connection (FerryPostgres' `Listener`).
@Suite(.hangLimit, .tags(.database), .tagSelection) struct CueTriggerTests {
    static let tables = """
        create table public.notes (id int primary key, user_id uuid, body text);
        select ferry.register_table('notes', 'lww');
        create table public.boxes (id int primary key, owner_id uuid not null, label text);
        select ferry.register_table('boxes', 'lww', owner_column => 'owner_id');
        create table public.news (id int primary key, title text);
        select ferry.register_table('news', 'shared');
        create table public.games (user_id uuid not null, slot text not null, primary key (user_id, slot));
        select ferry.register_table('games', 'device_lock');
        """

    /// A migrated database with `tables`, three users and a listener on `ferry_cue`.
    func withCues(
        _ body: (AccountsDatabase, CueInbox, _ users: [String]) async throws -> Void
    ) async throws {
        try await AccountsDatabase.with { database in
            try await database.admin.execute(Self.tables)
            let users = [try await database.newUser(), try await database.newUser(), try await database.newUser()]
            try await CueInbox.with(database.database.configuration) { inbox in
                try await body(database, inbox, users)
            }
        }
    }

    // MARK: - Owners

    @Test func multiRowInsertCuesEachOwnerOnce() async throws {
        try await withCues { database, inbox, users in
            try await database.admin.query(
                "insert into notes (id, user_id) select g, case when g % 2 = 0 then $1 else $2 end::uuid from generate_series(1, 10) g",
                [users[0], users[1]])
            let cues = try await inbox.drain(database.admin)
            #expect(cues.count == 2, "\(cues)")
            #expect(Set(cues) == ["\(users[0]) - notes", "\(users[1]) - notes"])
        }
    }

    @Test func aCueNamesTheWritersTransactionAfterItsDevice() async throws {
        try await withCues { database, inbox, users in
            let written = try await database.admin.execute(
                """
                begin;
                select set_config('ferry.device_id', 'ana@phone', true);
                insert into notes (id, user_id) values (1, '\(users[0])') returning _stamp::text;
                commit;
                """)
            let stamp = try #require(written[2][0, 0])
            // The device may hold an @ itself: the transaction follows the last one.
            #expect(
                try await inbox.drain(database.admin, withTransactions: true) == [
                    "\(users[0]) ana@phone@\(stamp) notes"
                ])
            let phone = try await database.connectAsClient(user: users[1], device: "phone")
            let answer = try await phone.push([["id": 1, "table": "notes", "op": "upsert", "row": ["id": 2]]])
            #expect(answer.outcomes == ["applied"], "\(answer)")
            let pushed = try #require(
                try await database.value("select _stamp::text from notes where id = 2"))
            // A push's cue, sent after its commit by another transaction, names the push's.
            #expect(
                try await inbox.drain(database.admin, withTransactions: true) == ["\(users[1]) phone@\(pushed) notes"])
        }
    }

    @Test func theWritingDeviceIsNamedWhenSet() async throws {
        try await withCues { database, inbox, users in
            let device = UUID().uuidString.lowercased()
            let client = try await database.connectAsClient(user: users[0], device: device)
            let answer = try await client.push([
                ["id": 1, "table": "notes", "op": "upsert", "row": ["id": 1, "body": "a"]],
                ["id": 2, "table": "notes", "op": "upsert", "row": ["id": 2, "body": "b"]],
                ["id": 3, "table": "notes", "op": "delete", "key": ["id": 1]],
            ])
            #expect(answer.outcomes == ["applied", "applied", "applied"], "\(answer)")
            // Every statement of the batch cued the same owner: PostgreSQL folds them into one.
            #expect(try await inbox.drain(database.admin) == ["\(users[0]) \(device) notes"])

            try await database.admin.execute(
                """
                begin;
                select set_config('ferry.device_id', 'cron-7', true);
                insert into notes (id, user_id) values (20, '\(users[1])');
                commit;
                begin;
                select set_config('ferry.device_id', '', true);
                insert into notes (id, user_id) values (21, '\(users[1])');
                commit;
                begin;
                select set_config('ferry.device_id', 'not one word', true);
                insert into notes (id, user_id) values (22, '\(users[2])');
                commit;
                """)
            #expect(
                try await inbox.drain(database.admin) == [
                    "\(users[1]) cron-7 notes", "\(users[1]) - notes", "\(users[2]) - notes",
                ])
            await client.close()
        }
    }

    /// 0013: push cues its own writes once per table it wrote a row in, and nothing for
    /// mutations that wrote nothing (duplicates, rejections, a delete of a tombstone).
    @Test func aPushCuesOncePerTableItWroteIn() async throws {
        try await withCues { database, inbox, users in
            let device = UUID().uuidString.lowercased()
            let client = try await database.connectAsClient(user: users[0], device: device)
            let first = try await client.push([
                ["id": 1, "table": "notes", "op": "upsert", "row": ["id": 1, "body": "a"]],
                ["id": 2, "table": "boxes", "op": "insert", "row": ["id": 1, "label": "x"]],
                ["id": 3, "table": "notes", "op": "delete", "key": ["id": 1]],
            ])
            #expect(first.outcomes == ["applied", "applied", "applied"], "\(first)")
            #expect(
                Set(try await inbox.drain(database.admin)) == [
                    "\(users[0]) \(device) notes", "\(users[0]) \(device) boxes",
                ])

            let nothing = try await client.push([
                ["id": 3, "table": "notes", "op": "upsert", "row": ["id": 9]],
                ["id": 4, "table": "notes", "op": "delete", "key": ["id": 1]],
                ["id": 5, "table": "boxes", "op": "insert", "row": ["id": 1, "label": "x"]],
                ["id": 6, "table": "news", "op": "upsert", "row": ["id": 1]],
            ])
            #expect(nothing.outcomes == ["duplicate", "applied", "duplicate", "rejected:read_only"], "\(nothing)")
            #expect(try await inbox.drain(database.admin) == [])
            await client.close()
        }
    }

    /// Push queues its cues instead of sending them at its commit: nothing is heard until
    /// `ferry.send_queued_cues` (the gateway's call after the commit) sends each distinct
    /// one once, in its own transaction; a rolled-back push queues nothing. Each push's
    /// cue names its own transaction, so two pushes are two cues (one stream cue, coalesced
    /// by the gateway).
    @Test func aPushQueuesItsCuesUntilTheGatewaySendsThemOnce() async throws {
        try await withCues { database, inbox, users in
            let phone = try await database.connectAsClient(user: users[0], device: "phone")
            for id in 1...2 {
                let answer = try await phone.push([
                    ["id": id, "table": "notes", "op": "upsert", "row": ["id": id, "body": "a"]]
                ])
                #expect(answer.outcomes == ["applied"], "\(answer)")
            }
            #expect(try await inbox.drain(database.admin, sendingQueued: false) == [])
            #expect(try await database.value("select count(*) from ferry.queued_cues") == "2")
            #expect(try await database.value("select ferry.send_queued_cues()") == "2")
            #expect(
                try await inbox.drain(database.admin, sendingQueued: false)
                    == Array(
                        repeating: "\(users[0]) phone notes", count: 2))
            #expect(try await database.value("select ferry.send_queued_cues()") == "0")

            let rolledBack = try await database.connectAsGateway()
            try await rolledBack.execute("begin")
            try await rolledBack.query(phone.identityStatement.sql, phone.identityStatement.parameters)
            try await rolledBack.query(
                "select ferry.push($1::jsonb)",
                [#"{"mutations": [{"id": 3, "table": "notes", "op": "upsert", "row": {"id": 3}}]}"#])
            try await rolledBack.execute("rollback")
            #expect(try await database.value("select count(*) from ferry.queued_cues") == "0")
            await rolledBack.close()
            await phone.close()
        }
    }

    /// Two gateways sending at once: the cues one is sending (its transaction not yet
    /// committed) are skipped by the other, not waited for nor sent twice, and go out
    /// with the first one's commit.
    @Test func queuedCuesBeingSentAreSkippedByAnotherSend() async throws {
        try await withCues { database, inbox, users in
            let phone = try await database.connectAsClient(user: users[0], device: "phone")
            _ = try await phone.push([["id": 1, "table": "notes", "op": "upsert", "row": ["id": 1]]])
            let first = try await database.connectAsGateway()
            try await first.execute("begin")
            #expect(try await first.query("select ferry.send_queued_cues()")[0, 0] == "1")
            let laptop = try await database.connectAsClient(user: users[1], device: "laptop")
            _ = try await laptop.push([["id": 2, "table": "notes", "op": "upsert", "row": ["id": 2]]])
            #expect(try await database.value("select ferry.send_queued_cues()") == "1", "only the laptop's")
            #expect(try await inbox.drain(database.admin, sendingQueued: false) == ["\(users[1]) laptop notes"])
            try await first.execute("commit")
            #expect(try await inbox.drain(database.admin, sendingQueued: false) == ["\(users[0]) phone notes"])
            #expect(try await database.value("select count(*) from ferry.queued_cues") == "0")
            for client in [phone, laptop] { await client.close() }
            await first.close()
        }
    }

    /// While push writes a table only that table's triggers are quiet: an operator's
    /// trigger that writes another synced table during the push still cues its owner.
    @Test func aWriteAnOperatorsTriggerMakesDuringAPushStillCues() async throws {
        try await withCues { database, inbox, users in
            try await database.admin.execute(
                """
                create function public.announce() returns trigger language plpgsql as $$
                begin
                    insert into public.news (id, title) values (new.id, 'note ' || new.id)
                        on conflict (id) do nothing;
                    return null;
                end $$;
                create trigger announce after insert on public.notes for each row execute function public.announce();
                grant insert on public.news to ferry_client;
                create policy ferry_test_insert on public.news for insert to ferry_client with check (true);
                """)
            let device = UUID().uuidString.lowercased()
            let client = try await database.connectAsClient(user: users[0], device: device)
            let answer = try await client.push([
                ["id": 1, "table": "notes", "op": "upsert", "row": ["id": 7, "body": "a"]]
            ])
            #expect(answer.outcomes == ["applied"], "\(answer)")
            #expect(
                Set(try await inbox.drain(database.admin)) == [
                    "\(users[0]) \(device) notes", "* \(device) news",
                ])
            #expect(try await database.value("select title from news") == "note 7")
            await client.close()
        }
    }

    /// ferry.skip_cues naming a table silences that table's triggers only.
    @Test func skipCuesNamingATableSilencesOnlyThatTable() async throws {
        try await withCues { database, inbox, users in
            try await database.admin.execute(
                """
                begin;
                select set_config('ferry.skip_cues', 'notes', true);
                insert into notes (id, user_id) values (1, '\(users[0])');
                insert into boxes (id, owner_id) values (1, '\(users[1])');
                commit;
                """)
            #expect(try await inbox.drain(database.admin) == ["\(users[1]) - boxes"])
        }
    }

    @Test func reowningRowsCuesTheOldAndTheNewOwner() async throws {
        try await withCues { database, inbox, users in
            try await database.admin.query(
                "insert into notes (id, user_id) select g, $1::uuid from generate_series(1, 4) g", [users[0]])
            try await database.admin.query(
                "insert into boxes (id, owner_id) select g, $1::uuid from generate_series(1, 4) g", [users[0]])
            _ = try await inbox.drain(database.admin)

            try await database.admin.query("update notes set user_id = $1 where id <= 2", [users[1]])
            let notes = try await inbox.drain(database.admin)
            #expect(notes.count == 2 && Set(notes) == ["\(users[0]) - notes", "\(users[1]) - notes"], "\(notes)")
            // An owner column other than user_id goes through the generic branch.
            try await database.admin.query("update boxes set owner_id = $1 where id <= 2", [users[2]])
            let boxes = try await inbox.drain(database.admin)
            #expect(boxes.count == 2 && Set(boxes) == ["\(users[0]) - boxes", "\(users[2]) - boxes"], "\(boxes)")
            try await database.admin.query("update boxes set label = 'x'")
            let relabelled = try await inbox.drain(database.admin)
            #expect(relabelled.count == 2 && Set(relabelled) == ["\(users[0]) - boxes", "\(users[2]) - boxes"])
        }
    }

    @Test func deletingRowsCuesTheirOwnersButDeletingTombstonesDoesNot() async throws {
        try await withCues { database, inbox, users in
            try await database.admin.query(
                "insert into notes (id, user_id) values (1, $1), (2, $2), (3, $2)", [users[0], users[1]])
            try await database.admin.query(
                "insert into boxes (id, owner_id) values (1, $1), (2, $2)", [users[0], users[1]])
            _ = try await inbox.drain(database.admin)

            try await database.admin.query("delete from notes where id in (1, 2)")
            let deleted = try await inbox.drain(database.admin)
            #expect(deleted.count == 2 && Set(deleted) == ["\(users[0]) - notes", "\(users[1]) - notes"])
            try await database.admin.query("delete from boxes where id = 2")
            #expect(try await inbox.drain(database.admin) == ["\(users[1]) - boxes"])

            // A tombstone's delete (a purge) tells no client anything new.
            try await database.admin.query("update notes set _deleted = true where id = 3")
            #expect(try await inbox.drain(database.admin) == ["\(users[1]) - notes"])
            try await database.admin.query("delete from notes where id = 3")
            try await database.admin.query("update boxes set _deleted = true")
            _ = try await inbox.drain(database.admin)
            try await database.admin.query("delete from boxes")
            #expect(try await inbox.drain(database.admin) == [])
        }
    }

    /// 0011: TRUNCATE would leave devices holding rows with no tombstone to tell them.
    @Test func truncateIsRefusedAndChangesNothingUntilTheGuardIsDisabled() async throws {
        try await withCues { database, inbox, users in
            try await database.admin.query(
                "insert into notes (id, user_id) values (1, $1), (2, $2)", [users[0], users[1]])
            try await database.admin.query("insert into news (id, title) values (1, 'hello')")
            _ = try await inbox.drain(database.admin)
            for table in ["notes", "news", "boxes, notes"] {
                do {
                    try await database.admin.execute("truncate \(table)")
                    Issue.record("truncate \(table) was accepted")
                } catch let error as PostgresError {
                    #expect(error.sqlState == "0A000", "\(error)")
                    #expect(error.message.contains("TRUNCATE of synced table public."), "\(error)")
                    #expect(error.hint?.contains("SET _deleted = true") == true, "\(error)")
                }
            }
            #expect(try await database.value("select count(*) from notes") == "2")
            #expect(try await database.value("select count(*) from news") == "1")

            // The documented way out, for a table emptied on purpose.
            try await database.admin.execute(
                """
                begin; alter table notes disable trigger ferry_refuse_truncate; truncate notes;
                alter table notes enable trigger ferry_refuse_truncate; commit
                """)
            #expect(try await database.value("select count(*) from notes") == "0")
            #expect(try await inbox.drain(database.admin) == [])
            let refused = await #expect(throws: PostgresError.self) {
                try await database.admin.execute("truncate notes")
            }
            #expect(refused?.sqlState == "0A000", "\(String(describing: refused))")
        }
    }

    @Test func tenThousandRowsOverThreeOwnersSendThreeSmallCues() async throws {
        try await withCues { database, inbox, users in
            try await database.admin.query(
                """
                insert into notes (id, user_id, body)
                select g, (array[$1, $2, $3]::uuid[])[g % 3 + 1], repeat('x', 100) from generate_series(1, 10000) g
                """, users)
            let inserted = try await inbox.drain(database.admin)
            #expect(Set(inserted) == Set(users.map { "\($0) - notes" }) && inserted.count == 3, "\(inserted)")
            #expect(inserted.allSatisfy { $0.utf8.count < 120 })
            try await database.admin.query("update notes set body = 'y'")
            #expect(try await inbox.drain(database.admin).count == 3)
        }
    }

    @Test func statementsThatTouchNoRowCueNothing() async throws {
        try await withCues { database, inbox, users in
            try await database.admin.query("insert into notes (id, user_id) values (1, $1)", [users[0]])
            _ = try await inbox.drain(database.admin)
            try await database.admin.execute(
                """
                insert into notes (id, user_id) select 2, user_id from notes where false;
                update notes set body = 'x' where id = 99;
                delete from notes where id = 99;
                insert into news (id) select 1 where false;
                update news set title = 'x';
                delete from news;
                """)
            #expect(try await inbox.drain(database.admin) == [])
        }
    }

    @Test func aRolledBackTransactionCuesNothing() async throws {
        try await withCues { database, inbox, users in
            try await database.admin.execute(
                """
                begin;
                insert into notes (id, user_id) values (1, '\(users[0])');
                insert into news (id, title) values (1, 'draft');
                rollback;
                """)
            #expect(try await inbox.drain(database.admin) == [])
            // A rejected mutation's subtransaction takes its cue with it.
            let client = try await database.connectAsClient(user: users[0])
            let answer = try await client.push([
                ["id": 1, "table": "boxes", "op": "upsert", "row": ["id": 1, "label": "x", "owner_id": users[1]]]
            ])
            #expect(answer.outcomes == ["rejected:forbidden"], "\(answer)")
            #expect(try await inbox.drain(database.admin) == [])
            await client.close()
        }
    }

    // MARK: - Shared tables

    @Test func aSharedTableCuesEveryUserOncePerStatement() async throws {
        try await withCues { database, inbox, _ in
            try await database.admin.query("insert into news (id, title) select g, 'n' from generate_series(1, 50) g")
            #expect(try await inbox.drain(database.admin) == ["* - news"])
            try await database.admin.execute(
                """
                begin;
                select set_config('ferry.device_id', 'editor', true);
                update news set title = 'm' where id < 10;
                commit;
                """)
            #expect(try await inbox.drain(database.admin) == ["* editor news"])
            try await database.admin.query("delete from news where id = 1")
            #expect(try await inbox.drain(database.admin) == ["* - news"])
        }
    }

    // MARK: - Locks

    @Test func claimingTakingOverAndReleasingCueButHeartbeatsDoNot() async throws {
        try await withCues { database, inbox, users in
            let phone = try await database.connectAsClient(user: users[0], device: "phone")
            let tablet = try await database.connectAsClient(user: users[0], device: "tablet")
            func status(_ client: RequestConnection, _ sql: String) async throws -> String? {
                let answer = try await client.query(sql)[0, 0] ?? ""
                let object = try JSONSerialization.jsonObject(with: Data(answer.utf8)) as? [String: Any]
                return object?["status"] as? String
            }

            #expect(try await status(phone, "select ferry.claim_lock('games', 'current')") == "ok")
            #expect(try await inbox.drain(database.admin) == ["\(users[0]) phone games"])
            #expect(try await status(phone, "select ferry.heartbeat_lock('games', 'current')") == "ok")
            #expect(try await status(phone, "select ferry.heartbeat_lock('games', 'current')") == "ok")
            #expect(try await inbox.drain(database.admin) == [])
            #expect(try await status(tablet, "select ferry.claim_lock('games', 'current', true)") == "ok")
            #expect(try await inbox.drain(database.admin) == ["\(users[0]) tablet games"])
            #expect(try await status(phone, "select ferry.heartbeat_lock('games', 'current')") == "lock_lost")
            #expect(try await inbox.drain(database.admin) == [])
            #expect(try await status(tablet, "select ferry.release_lock('games', 'current')") == "ok")
            #expect(try await inbox.drain(database.admin) == ["\(users[0]) tablet games"])

            // The rest of a heartbeat's transaction cues as before.
            #expect(try await status(tablet, "select ferry.claim_lock('games', 'current')") == "ok")
            #expect(try await inbox.drain(database.admin) == ["\(users[0]) tablet games"])
            try await tablet.client.execute("begin")
            try await tablet.client.query(tablet.identityStatement)
            try await tablet.client.query("select ferry.heartbeat_lock('games', 'current')")
            try await tablet.client.query("select ferry.release_lock('games', 'current')")
            try await tablet.client.execute("commit")
            #expect(try await inbox.drain(database.admin) == ["\(users[0]) tablet games"])
            await phone.close()
            await tablet.close()
        }
    }

    // MARK: - Registration

    @Test func registerTableInstallsOneTriggerPerEventAndFollowsTheStrategy() async throws {
        try await withCues { database, inbox, users in
            let triggers = """
                select tgname::text, (pg_get_triggerdef(oid) like '%REFERENCING%FOR EACH STATEMENT%')::text,
                    substring(pg_get_triggerdef(oid) from 'ferry.send_cues\\((.*)\\)$')
                from pg_trigger where tgrelid = 'notes'::regclass and tgname like 'ferry_cue%' order by 1
                """
            #expect(
                try await database.rows(triggers) == [
                    ["ferry_cue_delete", "true", "'user_id'"], ["ferry_cue_insert", "true", "'user_id'"],
                    ["ferry_cue_update", "true", "'user_id'"],
                ])
            // Registered again as shared, the same triggers cue everyone.
            try await database.admin.query("select ferry.register_table('notes', 'shared')")
            #expect(try await database.rows(triggers).map { $0[2] } == ["", "", ""])
            try await database.admin.query("insert into notes (id, user_id) values (1, $1)", [users[0]])
            #expect(try await inbox.drain(database.admin) == ["* - notes"])
        }
    }
}
