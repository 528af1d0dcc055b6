import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// `sql/ferry/functions/registry.sql` and `push.sql`: `ferry.register_table` and `ferry.push`,
/// against a real PostgreSQL, with every push run as `ferry_client` the way the gateway
/// runs it (identity statement and `select ferry.push(…)` in one pipeline).
@Suite(.hangLimit, .tags(.database), .tagSelection) struct SyncSQLTests {
    /// One table per strategy, shaped like the puzzle and to-do examples.
    static let tables = """
        create table public.profiles (
            user_id uuid primary key, username text, trophies int not null default 0 check (trophies >= 0));
        select ferry.register_table('profiles', 'lww');
        create table public.game_records (id text primary key, user_id uuid not null, seconds int not null);
        select ferry.register_table('game_records', 'insert_only');
        create table public.achievements (user_id uuid, name text, primary key (user_id, name));
        select ferry.register_table('achievements', 'set');
        create table public.active_game (user_id uuid, slot text, digits text, primary key (user_id, slot));
        select ferry.register_table('active_game', 'device_lock');
        create table public.subscriptions (user_id uuid primary key, plan text);
        select ferry.register_table('subscriptions', 'readonly');
        create table public.daily_puzzles (day date primary key, grid text);
        select ferry.register_table('daily_puzzles', 'shared');
        create table public.tasks (
            id text primary key, user_id uuid not null, parent_id text references public.tasks, title text);
        select ferry.register_table('tasks', 'lww');
        """

    /// A migrated database with `tables` registered and one user, `a`.
    func withTables(_ body: (AccountsDatabase, _ a: String) async throws -> Void) async throws {
        try await AccountsDatabase.with { database in
            try await database.admin.execute(Self.tables)
            try await body(database, try await database.newUser())
        }
    }

    func mutation(_ id: Int, _ table: String, _ op: String, _ row: [String: Any]) -> [String: Any] {
        ["id": id, "table": table, "op": op, op == "delete" ? "key" : "row": row]
    }

    // MARK: - register_table

    @Test func registerTableRefusesWhatItCannotSync() async throws {
        try await AccountsDatabase.with { database in
            try await database.admin.execute(
                """
                create table nopk (user_id uuid, x int);
                create table noowner (id int primary key);
                create table textowner (id int primary key, user_id text);
                create table widekey (user_id uuid, a int, b int, primary key (user_id, a, b));
                create table ownerless_key (user_id uuid, a int primary key);
                create table clash (id int primary key, user_id uuid, _stamp bigint);
                create table clash_deleted (id int primary key, user_id uuid, _deleted int);
                create table clash_updated (id int primary key, user_id uuid, updated_at date);
                create table clash_lock (user_id uuid, slot text, _lock_device int, primary key (user_id, slot));
                create table fine (id int primary key, user_id uuid);
                create schema other;
                create table other.fine (id int primary key, user_id uuid);
                create view a_view as select 1 as id;
                select ferry.register_table('fine', 'lww');
                """)
            let refusals: [(String, String, String)] = [
                ("select ferry.register_table('nopk', 'lww')", "42P16", "no primary key"),
                ("select ferry.register_table('noowner', 'lww')", "42703", "no owner column user_id"),
                ("select ferry.register_table('noowner', 'lww', 'owner')", "42703", "no owner column owner"),
                ("select ferry.register_table('textowner', 'insert_only')", "42804", "is text, not uuid"),
                ("select ferry.register_table('fine', 'lastwins')", "22023", "unknown strategy lastwins"),
                ("select ferry.register_table('fine', null)", "22023", "unknown strategy"),
                ("select ferry.register_table('widekey', 'device_lock')", "42P16", "owner column and one other"),
                ("select ferry.register_table('ownerless_key', 'device_lock')", "42P16", "owner column and one other"),
                ("select ferry.register_table('clash', 'lww')", "42804", "_stamp is bigint"),
                ("select ferry.register_table('clash_deleted', 'set')", "42804", "_deleted is integer"),
                ("select ferry.register_table('clash_updated', 'lww')", "42804", "updated_at is date"),
                ("select ferry.register_table('clash_lock', 'device_lock')", "42804", "_lock_device is integer"),
                ("select ferry.register_table('other.fine', 'lww')", "42P07", "another synced table is named fine"),
                ("select ferry.register_table('a_view', 'shared')", "42809", "not a table"),
                ("select ferry.register_table('fine', 'lww', options => '[]')", "22023", "options"),
            ]
            for (sql, state, fragment) in refusals {
                do {
                    try await database.admin.query(sql)
                    Issue.record("accepted, but must be refused: \(sql)")
                } catch let error as PostgresError {
                    #expect(error.sqlState == state, "\(sql): \(error)")
                    #expect(error.message.contains(fragment), "\(sql): \(error.message)")
                }
            }
            // Refused tables are left as they were: nothing added, nothing registered.
            #expect(
                try await database.value(
                    "select count(*) from pg_attribute where attrelid = 'clash_updated'::regclass and attname = '_stamp'"
                )
                    == "0")
            #expect(try await database.rows("select table_name::text from ferry.synced_tables") == [["fine"]])
        }
    }

    @Test func registerTableAddsColumnsTriggerIndexPoliciesAndGrants() async throws {
        try await withTables { database, _ in
            let columns = try await database.rows(
                """
                select attname::text, format_type(atttypid, atttypmod), attnotnull::text,
                    coalesce(pg_get_expr(d.adbin, d.adrelid), '')
                from pg_attribute a left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
                where attrelid = 'active_game'::regclass and attnum > 0 and not attisdropped order by attnum
                """)
            #expect(
                columns == [
                    ["user_id", "uuid", "true", ""], ["slot", "text", "true", ""], ["digits", "text", "false", ""],
                    ["_stamp", "xid8", "true", "pg_current_xact_id()"], ["_deleted", "boolean", "true", "false"],
                    ["updated_at", "timestamp with time zone", "true", "now()"],
                    ["_lock_device", "text", "false", ""],
                    ["_lock_heartbeat_at", "timestamp with time zone", "false", ""],
                ])
            #expect(
                try await database.rows(
                    """
                    select tgname::text, tgfoid::regprocedure::text from pg_trigger
                    where tgrelid = 'profiles'::regclass and not tgisinternal order by 1
                    """)
                    == [
                        ["ferry_cue_delete", "ferry.send_cues()"], ["ferry_cue_insert", "ferry.send_cues()"],
                        ["ferry_cue_update", "ferry.send_cues()"],
                        ["ferry_refuse_truncate", "ferry.refuse_truncate()"], ["ferry_stamp", "ferry.stamp_row()"],
                        ["ferry_tombstone_delete", "ferry.tombstone_delete()"],
                    ])
            let indexes = """
                select pg_get_indexdef(indexrelid) from pg_index
                where indrelid = $1::regclass and not indisprimary order by 1
                """
            #expect(
                try await database.rows(indexes, ["tasks"])
                    == [["CREATE INDEX tasks_user_id__stamp_idx ON public.tasks USING btree (user_id, _stamp)"]])
            #expect(
                try await database.rows(indexes, ["daily_puzzles"])
                    == [["CREATE INDEX daily_puzzles__stamp_idx ON public.daily_puzzles USING btree (_stamp)"]])
            #expect(
                try await database.rows(
                    "select relrowsecurity::text, relforcerowsecurity::text from pg_class where oid = 'achievements'::regclass"
                ) == [["true", "true"]])
            let policies = """
                select polname::text, polcmd::text, coalesce(pg_get_expr(polqual, polrelid), ''),
                    coalesce(pg_get_expr(polwithcheck, polrelid), ''), polroles::regrole[]::text
                from pg_policy where polrelid = $1::regclass order by polname
                """
            let owner = "(user_id = ( SELECT ferry.uid() AS uid))"
            #expect(
                try await database.rows(policies, ["profiles"]) == [
                    ["ferry_delete", "d", owner, "", "{ferry_client}"],
                    ["ferry_insert", "a", "", owner, "{ferry_client}"],
                    ["ferry_read", "r", owner, "", "{ferry_client}"],
                    ["ferry_update", "w", owner, owner, "{ferry_client}"],
                ])
            #expect(
                try await database.rows(policies, ["subscriptions"]) == [
                    ["ferry_read", "r", owner, "", "{ferry_client}"]
                ])
            #expect(
                try await database.rows(policies, ["daily_puzzles"]) == [
                    ["ferry_read", "r", "true", "", "{ferry_client}"]
                ])
            let privileges = """
                select string_agg(p, ',' order by p) from unnest(array['select', 'insert', 'update', 'delete']) p
                where has_table_privilege('ferry_client', $1::regclass, p)
                """
            for table in ["profiles", "game_records", "achievements", "tasks"] {
                #expect(try await database.value(privileges, [table]) == "delete,insert,select,update", "\(table)")
            }
            // device_lock: INSERT and UPDATE by column, never of the lock columns.
            #expect(try await database.value(privileges, ["active_game"]) == "delete,select")
            let columnPrivileges = """
                select string_agg(attname || ':' || (select coalesce(string_agg(p, '' order by p), '') from unnest(array['a', 'w']) p
                    where has_column_privilege('ferry_client', attrelid, attname,
                        case p when 'a' then 'insert' else 'update' end)), ',' order by attnum)
                from pg_attribute where attrelid = 'active_game'::regclass and attnum > 0 and not attisdropped
                """
            #expect(
                try await database.value(columnPrivileges)
                    == "user_id:aw,slot:aw,digits:aw,_stamp:,_deleted:w,updated_at:,_lock_device:,_lock_heartbeat_at:")
            for table in ["subscriptions", "daily_puzzles"] {
                #expect(try await database.value(privileges, [table]) == "select", "\(table)")
            }
            #expect(
                try await database.rows(
                    "select table_name::text, strategy, owner_column::text from ferry.synced_tables order by 1")
                    == [
                        ["achievements", "set", "user_id"], ["active_game", "device_lock", "user_id"],
                        ["daily_puzzles", "shared", nil], ["game_records", "insert_only", "user_id"],
                        ["profiles", "lww", "user_id"], ["subscriptions", "readonly", "user_id"],
                        ["tasks", "lww", "user_id"],
                    ])
            // No request role may register tables.
            let client = try await database.connectAsClient(user: try await database.newUser())
            let refused = await #expect(throws: PostgresError.self) {
                try await client.query("select ferry.register_table('profiles', 'shared')")
            }
            #expect(refused?.sqlState == "42501", "\(String(describing: refused))")
            await client.close()
        }
    }

    @Test func registeringTwiceIsHarmlessAndAppliesTheNewStrategy() async throws {
        try await withTables { database, _ in
            let shape = """
                select (select count(*) from pg_attribute where attrelid = 'profiles'::regclass and attnum > 0),
                    (select count(*) from pg_index where indrelid = 'profiles'::regclass),
                    (select count(*) from pg_trigger where tgrelid = 'profiles'::regclass),
                    (select count(*) from pg_policy where polrelid = 'profiles'::regclass)
                """
            let before = try await database.rows(shape)
            try await database.admin.query(
                "select ferry.register_table('profiles', strategy => 'lww', owner_column => 'user_id')")
            #expect(try await database.rows(shape) == before)

            try await database.admin.query(
                "select ferry.register_table('profiles', 'readonly', options => '{\"note\": \"billing\"}')")
            #expect(
                try await database.rows(
                    "select strategy, options::text from ferry.synced_tables where table_name = 'profiles'::regclass")
                    == [["readonly", "{\"note\": \"billing\"}"]])
            #expect(
                try await database.rows("select polname::text from pg_policy where polrelid = 'profiles'::regclass")
                    == [["ferry_read"]])
            #expect(try await database.value("select has_table_privilege('ferry_client', 'profiles', 'insert')") == "f")
        }
    }

    /// The account tests' `notes` is registered, not made by hand: it has a synced
    /// table's triggers, so seeding it stamps and cues like any write.
    @Test func theAccountTestsNotesTableIsRegisteredWithItsTriggers() async throws {
        try await AccountsDatabase.with { database in
            try await database.createNotes()
            #expect(
                try await database.rows(
                    "select tgname::text from pg_trigger where tgrelid = 'public.notes'::regclass order by 1")
                    == [
                        ["ferry_cue_delete"], ["ferry_cue_insert"], ["ferry_cue_update"], ["ferry_refuse_truncate"],
                        ["ferry_stamp"], ["ferry_tombstone_delete"],
                    ])
            let owner = try await database.newUser()
            try await database.seedNotes(owner: owner, [("n1", "one")])
            #expect(try await database.notes(of: owner) == [["n1", "one", "false"]])
            #expect(try await database.value("select count(*) from public.notes where _stamp is null") == "0")
            #expect(
                try await database.rows("select table_name::text, strategy from ferry.synced_tables")
                    == [["notes", "lww"]])
        }
    }

    @Test func theServerClockAndTransactionStampEveryWrite() async throws {
        try await withTables { database, a in
            let client = try await database.connectAsClient(user: a)
            let stamped = try await client.query(
                """
                with written as (
                    insert into public.profiles (user_id, username, updated_at) values ($1, 'ana', '2001-01-01')
                    returning updated_at, _stamp
                )
                select (updated_at = now())::text, (_stamp = pg_current_xact_id())::text from written
                """, [a])
            #expect(stamped.rows.map(\.values) == [["true", "true"]])
            let updated = try await client.query(
                """
                update public.profiles set username = 'bo', updated_at = '2001-01-01', _stamp = '1'
                returning (updated_at = now())::text, (_stamp = pg_current_xact_id())::text
                """)
            #expect(updated.rows.map(\.values) == [["true", "true"]])
            await client.close()
        }
    }

    // MARK: - Pull readers

    /// 0012: each table is pulled through a reader built at registration (static SQL, so
    /// its plans are kept). A reader built for another name or primary key is refused,
    /// never run with a stale key, until the table is registered again.
    @Test func registrationBuildsAPullReaderAndAStaleOneIsRefusedUntilRegisteredAgain() async throws {
        try await withTables { database, a in
            let readers = try await database.rows(
                """
                select s.table_name::text, s.pull_reader = 'ferry.pull_rows_' || s.table_name::oid,
                    exists (select from aclexplode(p.proacl) x where x.grantee = 0),
                    has_function_privilege('ferry_client', p.oid, 'execute')
                from ferry.synced_tables s join pg_proc p on p.oid = s.pull_reader::regproc
                order by 1
                """)
            #expect(readers.count == 7)
            #expect(readers.allSatisfy { $0.dropFirst() == ["t", "f", "t"] }, "\(readers)")
            // pull reaches them through ferry.pull_rows, rebuilt at each registration.
            let dispatcher = try await database.rows(
                """
                select exists (select from aclexplode(p.proacl) x where x.grantee = 0),
                    has_function_privilege('ferry_client', p.oid, 'execute'),
                    (length(prosrc) - length(replace(prosrc, 'ferry.pull_rows_', ''))) / length('ferry.pull_rows_')
                from pg_proc p where p.oid = 'ferry.pull_rows'::regproc
                """)
            #expect(dispatcher == [["f", "t", "7"]])

            try await database.admin.query("insert into public.tasks (id, user_id, title) values ('t1', $1, 'x')", [a])
            let client = try await database.connectAsClient(user: a)
            func pulledTasks() async throws -> String? {
                try await client.query(
                    "select jsonb_path_query_array(ferry.pull(null, 100), '$.changes.*.upserts[*].title')::text"
                )[0, 0]
            }
            func expectRefused(_ what: String) async {
                do {
                    _ = try await pulledTasks()
                    Issue.record("pull read a table whose \(what) changed")
                } catch let error as PostgresError {
                    #expect(error.sqlState == "55000", "\(error)")
                    #expect(error.hint?.contains("ferry.register_table") == true, "\(error)")
                } catch {
                    Issue.record("\(error)")
                }
            }
            #expect(try await pulledTasks() == #"["x"]"#)
            // A column named like one of the reader's parameters is not taken for it.
            try await database.admin.execute("alter table public.tasks add column p_from int, add column p_limit int")
            #expect(try await pulledTasks() == #"["x"]"#)

            try await database.admin.execute("alter table public.tasks rename to todos")
            await expectRefused("name")
            try await database.admin.execute("select ferry.register_table('todos', 'lww')")
            #expect(try await pulledTasks() == #"["x"]"#)

            try await database.admin.execute(
                "alter table public.todos drop constraint tasks_pkey cascade, add primary key (user_id, id)")
            await expectRefused("primary key")
            try await database.admin.execute("select ferry.register_table('todos', 'lww')")
            #expect(try await pulledTasks() == #"["x"]"#)
            await client.close()
        }
    }

    /// Two registrations in flight at once both end up in the dispatcher: the second
    /// waits for the first to commit before it reads the registry.
    @Test func concurrentRegistrationsEachKeepTheOthersTable() async throws {
        try await AccountsDatabase.with { database in
            let first = try await database.database.connect()
            let second = try await database.database.connect()
            try await first.execute(
                "begin; create table public.a (id int primary key, user_id uuid); select ferry.register_table('a', 'lww')"
            )
            let firstPID = await first.backendPID()
            let registering = Task {
                _ = try await second.execute(
                    """
                    begin; create table public.b (id int primary key, user_id uuid);
                    select ferry.register_table('b', 'lww'); commit
                    """)
            }
            // The second registration is waiting for the first's lock before the first commits.
            try await database.admin.waitForBackends(blockedBy: firstPID)
            try await first.execute("commit")
            try await registering.value
            let source = try await database.value("select prosrc from pg_proc where oid = 'ferry.pull_rows'::regproc")
            #expect(
                source?.contains("p_name = 'a'") == true && source?.contains("p_name = 'b'") == true, "\(source ?? "")")
            await first.close()
            await second.close()
        }
    }

    // MARK: - Push: two devices' first writes of one row

    /// Two devices of one user insert the same `set` row at once: the second waits for
    /// the first's insert, and when that commits it is decided on as if the row had been
    /// there (the same row: duplicate), never answered constraint_violation.
    @Test func aConcurrentFirstInsertOfTheSameKeyIsDecidedOnTheCommittedRow() async throws {
        try await withTables { database, a in
            let phone = try await database.connectAsClient(user: a, device: "phone")
            let laptop = try await database.connectAsClient(user: a, device: "laptop")
            defer {
                Task {
                    await phone.close()
                    await laptop.close()
                }
            }
            // The phone's insert, in a transaction left open.
            let insert = #"{"id": 1, "table": "achievements", "op": "insert", "row": {"name": "first_win"}}"#
            try await phone.client.execute("begin")
            let first = try PushAnswer(
                try await phone.client.pipeline([
                    phone.identityStatement,
                    PostgresStatement("select ferry.push($1::jsonb)", [#"{"mutations": ["# + insert + "]}"]),
                ])[1][0, 0])
            #expect(first.outcomes == ["applied"], "\(first)")
            let phonePID = await phone.client.backendPID()
            // The laptop's insert of the same key waits for it.
            let same = Task { try await laptop.push([mutation(1, "achievements", "insert", ["name": "first_win"])]) }
            try await database.admin.waitForBackends(blockedBy: phonePID)
            _ = try await phone.client.execute("commit")
            let second = try await same.value
            #expect(second.outcomes == ["duplicate"], "\(second)")
            #expect(try await database.value("select count(*) from achievements") == "1")
        }
    }

    // MARK: - Push: exactly once

    @Test func replayedBatchIsAllDuplicateAndChangesNothing() async throws {
        try await withTables { database, a in
            let client = try await database.connectAsClient(user: a)
            let batch = [
                mutation(1, "profiles", "upsert", ["username": "ana"]),
                mutation(2, "game_records", "insert", ["id": "g-1", "seconds": 312]),
                mutation(3, "achievements", "insert", ["name": "first_win"]),
                mutation(4, "tasks", "insert", ["id": "t-1", "title": "buy milk"]),
                mutation(5, "tasks", "delete", ["id": "t-1"]),
            ]
            let first = try await client.push(batch)
            #expect(first.outcomes == Array(repeating: "applied", count: 5), "\(first)")
            #expect(first.lastMutationID == 5)
            #expect(first.ids == [1, 2, 3, 4, 5])
            let everything = """
                select 'profiles', to_jsonb(p)::text from profiles p union all
                select 'game_records', to_jsonb(g)::text from game_records g union all
                select 'achievements', to_jsonb(x)::text from achievements x union all
                select 'tasks', to_jsonb(t)::text from tasks t order by 1, 2
                """
            let stored = try await database.rows(everything)
            #expect(stored.count == 4)

            let replay = try await client.push(batch)
            #expect(replay.outcomes == Array(repeating: "duplicate", count: 5), "\(replay)")
            #expect(replay.lastMutationID == 5)
            #expect(try await database.rows(everything) == stored, "stamps and times too")
            #expect(
                try await database.rows("select user_id::text, device_id, last_mutation_id::text from ferry.devices")
                    == [[a, "device-1", "5"]])
            await client.close()
        }
    }

    @Test func idsNotAboveAnEarlierOneInTheBatchAreDuplicates() async throws {
        try await withTables { database, a in
            let client = try await database.connectAsClient(user: a)
            let answer = try await client.push([
                mutation(7, "achievements", "insert", ["name": "a"]),
                mutation(7, "achievements", "insert", ["name": "b"]),
                mutation(3, "achievements", "insert", ["name": "c"]),
                mutation(9, "achievements", "insert", ["name": "d"]),
            ])
            #expect(answer.outcomes == ["applied", "duplicate", "duplicate", "applied"], "\(answer)")
            #expect(answer.lastMutationID == 9)
            #expect(try await database.rows("select name from achievements order by 1") == [["a"], ["d"]])
            // Another device of the same user counts from zero.
            let other = try await database.connectAsClient(user: a, device: "device-2")
            #expect(
                try await other.push([mutation(1, "achievements", "insert", ["name": "e"])]).outcomes == ["applied"])
            await other.close()
            await client.close()
        }
    }

    @Test func concurrentPushesOfOneBatchFromOneDeviceApplyOnce() async throws {
        try await withTables { database, a in
            let batch = (1...20).map { mutation($0, "tasks", "insert", ["id": "t-\($0)", "title": "task \($0)"]) }
            let body = String(decoding: try JSONSerialization.data(withJSONObject: ["mutations": batch]), as: UTF8.self)
            // The first push holds its transaction open; the second must wait for it.
            let first = try await database.connectAsClient(user: a)
            try await first.client.execute("begin")
            try await first.client.query(first.identityStatement)
            try await first.client.query("select ferry.push($1::jsonb)", [body])
            let firstPID = await first.client.backendPID()

            let second = try await database.connectAsClient(user: a)
            let waiting = Task { try await second.push(batch) }
            try await database.admin.waitForBackends(blockedBy: firstPID)
            try await first.client.execute("commit")
            let answer = try await waiting.value
            #expect(answer.outcomes == Array(repeating: "duplicate", count: 20), "\(answer)")
            #expect(try await database.value("select count(*) from tasks") == "20")
            #expect(try await database.value("select last_mutation_id::text from ferry.devices") == "20")
            await first.close()
            await second.close()
        }
    }

    // MARK: - Push: rejections

    @Test func eachRejectionCodeAndRejectionsStillAdvanceTheDevice() async throws {
        try await withTables { database, a in
            let b = try await database.newUser()
            try await database.admin.query(
                "insert into active_game (user_id, slot, digits, _lock_device) values ($1, 'current', '123', 'ipad')",
                [a])
            try await database.admin.query(
                "insert into game_records (id, user_id, seconds) values ('g-1', $1, 10)", [a])
            let client = try await database.connectAsClient(user: a)
            let answer = try await client.push([
                mutation(1, "no_such_table", "upsert", ["id": "x"]),
                mutation(2, "profiles", "upsert", ["username": "ana", "nickname": "an"]),
                mutation(3, "profiles", "upsert", ["username": "ana", "_stamp": "1"]),
                mutation(4, "profiles", "upsert", ["username": "ana", "_deleted": true]),
                mutation(5, "active_game", "upsert", ["slot": "current", "_lock_device": "phone"]),
                mutation(6, "profiles", "upsert", ["trophies": "many"]),
                mutation(7, "game_records", "insert", ["seconds": 5]),
                mutation(8, "profiles", "upsert", ["user_id": b, "username": "mallory"]),
                mutation(9, "game_records", "insert", ["id": "g-1", "seconds": 11]),
                mutation(10, "subscriptions", "upsert", ["plan": "pro"]),
                mutation(11, "daily_puzzles", "upsert", ["day": "2026-01-01", "grid": "x"]),
                mutation(12, "active_game", "upsert", ["slot": "current", "digits": "999"]),
                mutation(13, "profiles", "upsert", ["trophies": -1]),
                mutation(14, "tasks", "insert", ["id": "t-1", "parent_id": "missing"]),
                mutation(15, "profiles", "remove", ["username": "x"]),
                mutation(16, "profiles", "upsert", ["user_id": "not-a-uuid"]),
            ])
            #expect(
                answer.outcomes == [
                    "rejected:unknown_table", "rejected:unknown_column", "rejected:unknown_column",
                    "rejected:unknown_column", "rejected:unknown_column", "rejected:invalid_row",
                    "rejected:invalid_row",
                    "rejected:forbidden", "rejected:immutable", "rejected:read_only", "rejected:read_only",
                    "rejected:lock_not_held", "rejected:constraint_violation", "rejected:constraint_violation",
                    "rejected:invalid_row", "rejected:invalid_row",
                ], "\(answer)")
            #expect(answer.messages.count == 16, "every rejection says why")
            #expect(answer.lastMutationID == 16)
            #expect(try await database.value("select last_mutation_id::text from ferry.devices") == "16")
            #expect(try await database.value("select count(*) from profiles") == "0")
            #expect(try await database.value("select count(*) from tasks") == "0")
            #expect(try await database.value("select digits from active_game") == "123")
            #expect(try await database.value("select seconds::text from game_records") == "10")
            // The lock holder may write its row.
            let holder = try await database.connectAsClient(user: a, device: "ipad")
            #expect(
                try await holder.push([mutation(1, "active_game", "upsert", ["slot": "current", "digits": "456"])])
                    .outcomes == ["applied"])
            await holder.close()
            await client.close()
        }
    }

    @Test func aRejectionInTheMiddleNeitherAbortsTheBatchNorBlocksTheNext() async throws {
        try await withTables { database, a in
            let client = try await database.connectAsClient(user: a)
            let answer = try await client.push([
                mutation(1, "tasks", "insert", ["id": "root", "title": "root"]),
                mutation(2, "tasks", "insert", ["id": "child", "parent_id": "nowhere", "title": "lost"]),
                mutation(3, "tasks", "insert", ["id": "child", "parent_id": "root", "title": "found"]),
                mutation(4, "profiles", "upsert", ["trophies": -5]),
                mutation(5, "profiles", "upsert", ["trophies": 5]),
            ])
            #expect(
                answer.outcomes == [
                    "applied", "rejected:constraint_violation", "applied", "rejected:constraint_violation", "applied",
                ], "\(answer)")
            #expect(
                try await database.rows("select id, parent_id, title from tasks order by id")
                    == [["child", "root", "found"], ["root", nil, "root"]])
            #expect(try await database.value("select trophies::text from profiles") == "5")
            await client.close()
        }
    }

    @Test func malformedBatchesRaiseWithoutWriting() async throws {
        try await withTables { database, a in
            let client = try await database.connectAsClient(user: a)
            for body in [#"{"mutations": 5}"#, #"[{"id": "1"}]"#, #"[{"id": -1}]"#, #"[{"id": 1.5}]"#, #"[7]"#] {
                do {
                    try await client.query("select ferry.push($1::jsonb)", [body])
                    Issue.record("accepted: \(body)")
                } catch let error as PostgresError {
                    #expect(error.sqlState == "22023", "\(body): \(error)")
                }
            }
            #expect(try await database.value("select count(*) from ferry.devices") == "0")
            await client.close()
        }
    }

    // MARK: - Push: static upserts

    /// 0013: an lww upsert runs the table's static upsert while the table's shape is the
    /// one it was written for, storing what the statement built per mutation stored:
    /// defaults for columns not given, given columns merged into an existing row.
    @Test func lwwUpsertsUseTheStaticStatementAndMergeLikeTheBuiltOne() async throws {
        try await withTables { database, a in
            let client = try await database.connectAsClient(user: a)
            let shape = try #require(try await database.value("select ferry.upsert_shape('profiles')"))
            #expect(
                try await client.query(
                    "select ferry.upsert_row('profiles', $1, $2::jsonb)::text", [shape, #"{"user_id": "\#(a)"}"#]
                )[0, 0] == "true")
            #expect(
                try await client.query(
                    "select ferry.upsert_row('profiles', 'another shape', $1::jsonb)::text", [#"{"user_id": "\#(a)"}"#]
                )[0, 0] == "false")

            let first = try await client.push([mutation(1, "profiles", "upsert", ["username": "ana"])])
            #expect(first.outcomes == ["applied"])
            // trophies has a default (0) and was not given; username is kept by the next upsert.
            let second = try await client.push([mutation(2, "profiles", "upsert", ["trophies": 3])])
            #expect(second.outcomes == ["applied"])
            #expect(try await database.rows("select username, trophies::text from profiles") == [["ana", "3"]])
            let negative = try await client.push([mutation(3, "profiles", "upsert", ["trophies": -1])])
            #expect(negative.outcomes == ["rejected:constraint_violation"])
            await client.close()
        }
    }

    /// A column added after registration changes the table's shape: push builds the
    /// statement for the given columns again (the new column is stored, never dropped)
    /// until the table is registered again.
    @Test func aColumnAddedAfterRegistrationIsStoredAndRegisteringAgainRestoresTheStaticUpsert() async throws {
        try await withTables { database, a in
            let client = try await database.connectAsClient(user: a)
            try await database.admin.execute("alter table public.profiles add column motto text default 'hi'")
            let shape = try #require(try await database.value("select ferry.upsert_shape('profiles')"))
            #expect(
                try await client.query(
                    "select ferry.upsert_row('profiles', $1, $2::jsonb)::text", [shape, #"{"user_id": "\#(a)"}"#]
                )[0, 0] == "false")
            #expect(try await client.push([mutation(1, "profiles", "upsert", ["motto": "go"])]).outcomes == ["applied"])
            #expect(try await database.value("select motto from profiles") == "go")

            try await database.admin.execute("select ferry.register_table('profiles', 'lww')")
            #expect(
                try await client.query(
                    "select ferry.upsert_row('profiles', $1, $2::jsonb)::text", [shape, #"{"user_id": "\#(a)"}"#]
                )[0, 0] == "true")
            try await database.admin.execute("begin; set local ferry.hard_delete = on; delete from profiles; commit;")
            #expect(
                try await client.push([mutation(2, "profiles", "upsert", ["username": "bo"])]).outcomes == ["applied"])
            #expect(try await database.rows("select username, motto from profiles") == [["bo", "hi"]])

            // Another default is another shape too: the new default is stored, never the old.
            try await database.admin.execute("alter table public.profiles alter column motto set default 'yo'")
            #expect(try await database.value("select ferry.upsert_shape('profiles')") != shape)
            try await database.admin.execute("begin; set local ferry.hard_delete = on; delete from profiles; commit;")
            #expect(
                try await client.push([mutation(3, "profiles", "upsert", ["username": "cy"])]).outcomes == ["applied"])
            #expect(try await database.rows("select username, motto from profiles") == [["cy", "yo"]])
            await client.close()
        }
    }

    /// A table with an identity column gets no static upsert (its default could not be
    /// written into one); push builds its statements as before.
    @Test func aTableWithAnIdentityColumnKeepsTheBuiltStatement() async throws {
        try await withTables { database, a in
            try await database.admin.execute(
                """
                create table public.counters (
                    user_id uuid, name text, serial bigint generated by default as identity, n int,
                    primary key (user_id, name));
                select ferry.register_table('counters', 'lww');
                """)
            #expect(try await database.value("select ferry.upsert_shape('counters') is null") == "t")
            let client = try await database.connectAsClient(user: a)
            let answer = try await client.push([mutation(1, "counters", "upsert", ["name": "x", "n": 1])])
            #expect(answer.outcomes == ["applied"])
            #expect(
                try await database.rows("select name, n::text, (serial > 0)::text from counters") == [
                    ["x", "1", "true"]
                ])
            await client.close()
        }
    }

    // MARK: - Push: strategies

    @Test func upsertIsAMergeWriteAndRevivesTombstones() async throws {
        try await withTables { database, a in
            let client = try await database.connectAsClient(user: a)
            _ = try await client.push([mutation(1, "profiles", "upsert", ["username": "ana", "trophies": 3])])
            let answer = try await client.push([
                mutation(2, "profiles", "upsert", ["trophies": 4, "updated_at": "2001-01-01T00:00:00Z"])
            ])
            #expect(answer.outcomes == ["applied"], "\(answer)")
            #expect(
                try await database.rows(
                    "select username, trophies::text, (updated_at > '2001-01-02')::text from profiles")
                    == [["ana", "4", "true"]])
            _ = try await client.push([mutation(3, "profiles", "delete", [:])])
            #expect(try await database.value("select _deleted::text from profiles") == "true")
            // A revived row starts from the columns given: trophies takes its default, not the deleted 4.
            _ = try await client.push([mutation(4, "profiles", "upsert", ["username": "bo"])])
            #expect(
                try await database.rows("select username, trophies::text, _deleted::text from profiles") == [
                    ["bo", "0", "false"]
                ])
            // Inserting a row that differs from a live one is immutable, even for lww; the same row is duplicate.
            let again = try await client.push([
                mutation(5, "profiles", "insert", ["username": "bo"]),
                mutation(6, "profiles", "insert", ["username": "cy"]),
                mutation(7, "profiles", "delete", ["user_id": a]),
                mutation(8, "profiles", "delete", ["user_id": a]),
                mutation(9, "tasks", "delete", ["id": "never-existed"]),
            ])
            #expect(again.outcomes == ["duplicate", "rejected:immutable", "applied", "applied", "applied"], "\(again)")
            await client.close()
        }
    }

    @Test func insertOnlyRowsNeverChange() async throws {
        try await withTables { database, a in
            let client = try await database.connectAsClient(user: a)
            let answer = try await client.push([
                mutation(1, "game_records", "insert", ["id": "g-1", "seconds": 312]),
                mutation(2, "game_records", "insert", ["id": "g-1", "seconds": 312, "user_id": a]),
                mutation(3, "game_records", "insert", ["id": "g-1", "seconds": 313]),
                mutation(4, "game_records", "upsert", ["id": "g-1", "seconds": 314]),
                mutation(5, "game_records", "delete", ["id": "g-1"]),
                mutation(6, "game_records", "upsert", ["id": "g-2", "seconds": 20]),
            ])
            #expect(
                answer.outcomes == [
                    "applied", "duplicate", "rejected:immutable", "rejected:immutable", "rejected:immutable", "applied",
                ], "\(answer)")
            #expect(
                try await database.rows("select id, seconds::text, _deleted::text from game_records order by id")
                    == [["g-1", "312", "false"], ["g-2", "20", "false"]])
            await client.close()
        }
    }

    @Test func setMembershipAddsOnceAndDeletesByTombstone() async throws {
        try await withTables { database, a in
            let client = try await database.connectAsClient(user: a)
            let answer = try await client.push([
                mutation(1, "achievements", "insert", ["name": "first_win"]),
                mutation(2, "achievements", "insert", ["name": "first_win"]),
                mutation(3, "achievements", "upsert", ["name": "first_win"]),
                mutation(4, "achievements", "delete", ["name": "first_win"]),
            ])
            #expect(answer.outcomes == ["applied", "duplicate", "duplicate", "applied"], "\(answer)")
            #expect(
                try await database.rows("select name, _deleted::text from achievements") == [["first_win", "true"]])
            let readd = try await client.push([mutation(5, "achievements", "insert", ["name": "first_win"])])
            #expect(readd.outcomes == ["applied"])
            #expect(
                try await database.rows("select name, _deleted::text from achievements") == [["first_win", "false"]])
            await client.close()
        }
    }

    // MARK: - Push: ownership and crafted names

    @Test func ownerIsTheCallerAndAnotherOwnerIsForbidden() async throws {
        try await withTables { database, a in
            let b = try await database.newUser()
            let client = try await database.connectAsClient(user: a)
            let answer = try await client.push([
                mutation(1, "tasks", "insert", ["id": "t-1", "title": "mine"]),
                mutation(2, "tasks", "insert", ["id": "t-2", "title": "named", "user_id": a]),
                mutation(3, "tasks", "insert", ["id": "t-3", "title": "null owner", "user_id": NSNull()]),
                mutation(4, "tasks", "insert", ["id": "t-4", "title": "theirs", "user_id": b]),
                mutation(5, "tasks", "delete", ["id": "t-1", "user_id": b]),
            ])
            #expect(
                answer.outcomes == ["applied", "applied", "applied", "rejected:forbidden", "rejected:forbidden"],
                "\(answer)")
            #expect(
                try await database.rows("select id, user_id::text from tasks order by id")
                    == [["t-1", a], ["t-2", a], ["t-3", a]])
            await client.close()
        }
    }

    @Test func userBCannotTouchTheRowsOfUserAThroughPush() async throws {
        try await withTables { database, a in
            let b = try await database.newUser()
            let alice = try await database.connectAsClient(user: a)
            _ = try await alice.push([
                mutation(1, "tasks", "insert", ["id": "t-1", "title": "alice's"]),
                mutation(2, "profiles", "upsert", ["username": "alice"]),
            ])
            let before = try await database.rows(
                "select to_jsonb(t)::text from tasks t union all select to_jsonb(p)::text from profiles p")
            let bob = try await database.connectAsClient(user: b)
            let answer = try await bob.push([
                mutation(1, "tasks", "upsert", ["id": "t-1", "title": "bob was here"]),
                mutation(2, "tasks", "insert", ["id": "t-1", "title": "bob was here"]),
                mutation(3, "tasks", "delete", ["id": "t-1"]),
                mutation(4, "profiles", "upsert", ["user_id": a, "username": "bob"]),
                mutation(5, "profiles", "delete", ["user_id": a]),
                mutation(6, "tasks", "insert", ["id": "t-2", "parent_id": "t-1", "title": "child of alice's"]),
            ])
            // A's row is invisible to B: an upsert of its key meets it under RLS (forbidden), an
            // insert collides with it (a constraint), a delete finds nothing. Tables keyed by
            // their owner avoid even that collision.
            #expect(
                answer.outcomes == [
                    "rejected:forbidden", "rejected:constraint_violation", "applied", "rejected:forbidden",
                    "rejected:forbidden", "applied",
                ], "\(answer)")
            #expect(
                try await database.rows(
                    "select to_jsonb(t)::text from tasks t where id = 't-1' union all select to_jsonb(p)::text from profiles p"
                )
                    == before)
            #expect(try await bob.query("select count(*) from tasks")[0, 0] == "1", "B sees its own row only")
            await alice.close()
            await bob.close()
        }
    }

    @Test func craftedTableAndColumnNamesAreRejectedAndHarmless() async throws {
        try await withTables { database, a in
            try await database.admin.execute(
                """
                create table public."Odd ""Name""; x" (user_id uuid, "key col" text, "Value" text, primary key (user_id, "key col"));
                select ferry.register_table('public."Odd ""Name""; x"', 'lww');
                """)
            let client = try await database.connectAsClient(user: a)
            let answer = try await client.push([
                mutation(1, "tasks; drop table tasks", "insert", ["id": "x"]),
                mutation(2, "\"tasks\"", "insert", ["id": "x"]),
                mutation(3, "public.tasks", "insert", ["id": "x"]),
                mutation(4, "tasks", "insert", ["id": "x", "title\" = 'y'; drop table tasks; --": "z"]),
                mutation(5, "tasks", "insert", ["id": "x", "\"title\"": "z"]),
                mutation(6, "tasks", "delete", ["id = id or true; --": "x"]),
                mutation(7, "Odd \"Name\"; x", "upsert", ["key col": "k", "Value": "v"]),
            ])
            #expect(
                answer.outcomes == [
                    "rejected:unknown_table", "rejected:unknown_table", "rejected:unknown_table",
                    "rejected:unknown_column",
                    "rejected:unknown_column", "rejected:unknown_column", "applied",
                ], "\(answer)")
            #expect(try await database.value("select count(*) from tasks") == "0")
            #expect(try await database.rows(#"select "key col", "Value" from "Odd ""Name""; x""#) == [["k", "v"]])
            await client.close()
        }
    }

    @Test func deletingAUserDeletesItsDevices() async throws {
        try await withTables { database, a in
            let client = try await database.connectAsClient(user: a)
            _ = try await client.push([mutation(1, "achievements", "insert", ["name": "x"])])
            await client.close()
            #expect(try await database.value("select count(*) from ferry.devices") == "1")
            try await database.admin.query("delete from achievements")
            try await database.admin.query("delete from ferry.users where id = $1", [a])
            #expect(try await database.value("select count(*) from ferry.devices") == "0")
        }
    }

    @Test func devicesAreReadableByTheirOwnerOnly() async throws {
        try await withTables { database, a in
            let b = try await database.newUser()
            for user in [a, b] {
                let client = try await database.connectAsClient(user: user)
                _ = try await client.push([mutation(3, "achievements", "insert", ["name": "x"])])
                await client.close()
            }
            let client = try await database.connectAsClient(user: a)
            #expect(
                try await client.query("select user_id::text, last_mutation_id::text from ferry.devices").rows.map(
                    \.values) == [[a, "3"]])
            let refused = await #expect(throws: PostgresError.self) {
                try await client.query("update ferry.devices set last_mutation_id = 0")
            }
            #expect(refused?.sqlState == "42501", "\(String(describing: refused))")
            await client.close()
        }
    }

    // MARK: - Schema

    @Test func tableSchemaListsWhatTheCallerMayReadWithClientVisibleColumns() async throws {
        try await withTables { database, a in
            // A registered table the request role lost SELECT on is left out.
            try await database.admin.execute(
                """
                create table public.hidden (id int primary key, user_id uuid);
                select ferry.register_table('hidden', 'lww');
                revoke select on public.hidden from ferry_client;
                """)
            let client = try await database.connectAsClient(user: a)
            let text = try #require(try await client.query("select ferry.table_schema()")[0, 0])
            await client.close()
            let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
            let tables = try #require(object?["tables"] as? [[String: Any]], "\(text)")
            #expect(
                tables.compactMap { $0["name"] as? String } == [
                    "achievements", "active_game", "daily_puzzles", "game_records", "profiles", "subscriptions",
                    "tasks",
                ])
            let game = try #require(tables.first { $0["name"] as? String == "active_game" })
            #expect(game["strategy"] as? String == "device_lock")
            #expect(game["owner"] as? String == "user_id")
            #expect(game["key"] as? [String] == ["user_id", "slot"])
            let columns = (game["columns"] as? [[String: String]])?.map { [$0["name"] ?? "", $0["type"] ?? ""] }
            #expect(
                columns == [
                    ["user_id", "uuid"], ["slot", "text"], ["digits", "text"],
                    ["updated_at", "timestamp with time zone"],
                ])
            let puzzles = try #require(tables.first { $0["name"] as? String == "daily_puzzles" })
            #expect(puzzles["owner"] is NSNull)
            #expect(puzzles["strategy"] as? String == "shared")
        }
    }
}
