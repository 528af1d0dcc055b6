import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// A SQL `DELETE` on a registered table (sql/ferry/functions/deletes.sql): a tombstone
/// that `/v1/pull` and `/v1/watermelon/sync` send as a delete, unless the session sets
/// `ferry.hard_delete`; and Ferry's own deletions (account deletion, keep_cloud,
/// cleanup-anonymous, the purge) still remove rows for good.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct OperatorDeleteTests {
    @Test func anOperatorsDeleteReachesPullAndWatermelonSyncAsADelete() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            try await server.database.admin.execute(
                "insert into tasks (id, user_id, title) values ('t1', '\(phone.userID)', 'milk'), "
                    + "('t2', '\(phone.userID)', 'eggs')")
            let first = try await server.pull(phone)
            #expect(first.upserts("tasks").count == 2, "\(first.response)")
            let timestamp = try await server.watermelonPull(phone)

            let deleted = try await server.database.admin.query("delete from tasks where id = 't1'")
            // The DELETE itself deleted nothing: the trigger tombstoned the row instead.
            #expect(deleted.affectedRows == 0)
            #expect(
                try await server.database.rows("select id, _deleted::text from tasks order by id")
                    == [["t1", "true"], ["t2", "false"]])

            let next = try await server.pull(phone, cursor: first.cursor)
            #expect(next.upserts("tasks").isEmpty, "\(next.response)")
            #expect(next.deletes("tasks").map { $0["id"] as? String } == ["t1"], "\(next.response)")
            let watermelon = try await server.call(
                "GET", "\(WatermelonRoutes.path)?last_pulled_at=\(timestamp)", token: phone.accessToken)
            #expect(watermelon.value("changes", "tasks", "deleted") as? [String] == ["t1"], "\(watermelon)")
            #expect((watermelon.value("changes", "tasks", "updated") as? [Any])?.isEmpty == true, "\(watermelon)")

            // Deleting the tombstone again changes nothing; a fresh first load leaves it out.
            try await server.database.admin.query("delete from tasks where id = 't1'")
            #expect(try await server.database.value("select count(*) from tasks where _deleted") == "1")
            #expect(try await server.pull(phone).upserts("tasks").map { $0["id"] as? String } == ["t2"])
        }
    }

    @Test func aSessionThatAsksForAHardDeleteRemovesTheRowForGood() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            try await server.database.admin.execute(
                "insert into tasks (id, user_id) values ('t1', '\(phone.userID)'), ('t2', '\(phone.userID)')")
            try await server.database.admin.execute(
                "begin; set local ferry.hard_delete = on; delete from tasks where id = 't1'; commit;")
            #expect(try await server.database.rows("select id from tasks order by id") == [["t2"]])
            // Only for that transaction: the next DELETE tombstones again.
            try await server.database.admin.query("delete from tasks where id = 't2'")
            #expect(try await server.database.rows("select id, _deleted::text from tasks") == [["t2", "true"]])
            // A value that is not a boolean is refused, not read as either.
            let refused = await sqlError {
                try await server.database.admin.execute(
                    "begin; set local ferry.hard_delete = maybe; delete from tasks; commit;")
            }
            #expect(refused?.sqlState == "22P02", "\(String(describing: refused))")
            try await server.database.admin.execute("rollback")
        }
    }

    @Test func aDeleteByTheRowsOwnRoleTombstonesItToo() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            try await server.database.admin.execute(
                "insert into tasks (id, user_id) values ('t1', '\(phone.userID)')")
            let client = try await server.database.connectAsClient(user: phone.userID)
            _ = try await client.query("delete from tasks where id = 't1'")
            await client.close()
            #expect(try await server.database.rows("select id, _deleted::text from tasks") == [["t1", "true"]])
        }
    }

    @Test func ferrysOwnDeletionsStillRemoveRowsForGood() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            // keep_cloud: the anonymous user's rows go with it.
            let cloud = try await server.emailAccount("cloud@example.com")
            let anonymous = try await server.signUpAnonymous()
            try await server.database.admin.execute(
                "insert into tasks (id, user_id) values ('mine', '\(anonymous.userID)'), "
                    + "('theirs', '\(cloud.userID)')")
            let signedIn = try await server.call(
                "POST", "/v1/auth/signin", token: anonymous.accessToken,
                json: [
                    "email": "cloud@example.com", "password": "correct horse battery",
                    "device_id": anonymous.deviceID, "resolve": "keep_cloud",
                ])
            #expect(signedIn.status == 200, "\(signedIn)")
            #expect(try await server.database.rows("select id, _deleted::text from tasks") == [["theirs", "false"]])

            // Account deletion.
            let deleted = try await server.call(
                "DELETE", "/v1/account", token: cloud.accessToken, json: ["confirm": "DELETE"])
            #expect(deleted.status == 204, "\(deleted)")
            #expect(try await server.database.value("select count(*) from tasks") == "0")

            // cleanup-anonymous.
            let idle = try await server.signUpAnonymous()
            try await server.database.admin.execute(
                """
                insert into tasks (id, user_id) values ('idle', '\(idle.userID)');
                update ferry.users set last_seen_at = now() - interval '100 days' where id = '\(idle.userID)';
                """)
            let gateway = try await server.database.connectAsGateway()
            _ = try await gateway.query("select ferry.cleanup_anonymous(interval '30 days', 10)")
            #expect(try await server.database.value("select count(*) from tasks") == "0")

            // The purge: tombstones older than the retention go, not as tombstones of tombstones.
            let active = try await server.signUpAnonymous()
            try await server.database.admin.execute(
                """
                insert into tasks (id, user_id) values ('old', '\(active.userID)');
                delete from tasks where id = 'old';
                begin;
                set local session_replication_role = replica;
                update tasks set updated_at = now() - interval '40 days';
                commit;
                """)
            #expect(
                try await gateway.query("select ferry.purge_tombstones(interval '30 days', 10)")[0, 0] == "1")
            #expect(try await server.database.value("select count(*) from tasks") == "0")
            await gateway.close()
        }
    }

    @Test func keepDeviceReplacesTheCloudRowsUnderTheSameKey() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let cloud = try await server.emailAccount("both@example.com")
            let anonymous = try await server.signUpAnonymous()
            try await server.database.admin.execute(
                "insert into tasks (id, user_id, title) values ('same', '\(anonymous.userID)', 'device'), "
                    + "('same', '\(cloud.userID)', 'cloud'), ('other', '\(cloud.userID)', 'cloud')")
            let signedIn = try await server.call(
                "POST", "/v1/auth/signin", token: anonymous.accessToken,
                json: [
                    "email": "both@example.com", "password": "correct horse battery",
                    "device_id": anonymous.deviceID, "resolve": "keep_device",
                ])
            #expect(signedIn.status == 200, "\(signedIn)")
            #expect(
                try await server.database.rows("select id, title, _deleted::text from tasks order by id")
                    == [["other", "cloud", "true"], ["same", "device", "false"]])
        }
    }
}
