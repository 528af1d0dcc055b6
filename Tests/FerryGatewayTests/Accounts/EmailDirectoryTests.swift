import FerryAuth
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// The email directory (`--directory-database-url`, sql/directory): two shards, each its
/// own database and gateway, sharing one directory database. An email is unique across
/// them (link, and with confirmation required, confirm: whoever confirms first owns it);
/// deleting the account frees it; a claim left pending by a crash between the steps is
/// settled by its own shard; a directory that does not answer changes nothing.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct EmailDirectoryTests {
    let password = "correct horse battery"

    @Test func anEmailLinkedOnOneShardIsInUseOnTheOther() async throws {
        try await withDirectoryShards { shards in
            let onA = try await shards[0].signUpAnonymous()
            #expect(Shard.of(try #require(UUID(uuidString: onA.userID))) == 1)
            let linked = try await shards[0].link(onA, email: "Ann@Example.com", password: password)
            #expect(linked.status == 200, "\(linked)")
            let row = try await shards.row("ann@example.com")
            #expect(row?.shard == 1 && row?.user == onA.userID && row?.state == "linked", "\(String(describing: row))")

            let onB = try await shards[1].signUpAnonymous()
            let refused = try await shards[1].link(onB, email: "ann@example.com", password: password)
            #expect(refused.status == 409 && refused.code == "email_in_use", "\(refused)")
            let emailOnB = try await shards[1].database.value(
                "select email from ferry.users where id = $1", [onB.userID])
            #expect(emailOnB == nil)
            // A retry of the holder's own link is its usual answer.
            let again = try await shards[0].link(onA, email: "ann@example.com", password: password)
            #expect(again.status == 409 && again.code == "already_linked", "\(again)")
            #expect(try await shards.row("ann@example.com")?.state == "linked")

            // Deleting the account frees the email for the other shard.
            let deleted = try await shards[0].call(
                "DELETE", "/v1/account", token: onA.accessToken, json: ["confirm": "DELETE"])
            #expect(deleted.status == 204, "\(deleted)")
            #expect(try await shards.row("ann@example.com") == nil)
            let now = try await shards[1].link(onB, email: "ann@example.com", password: password)
            #expect(now.status == 200, "\(now)")
            #expect(try await shards.row("ann@example.com")?.shard == 2)
        }
    }

    @Test func aClaimLeftPendingIsSettledByItsShard() async throws {
        try await withDirectoryShards { shards in
            // A link whose shard committed, then the gateway died before marking it linked.
            let committed = try await shards[0].emailAccount("committed@example.com")
            try await shards.directory.admin.execute(
                """
                update directory.emails set state = 'pending', linked_at = null, claimed_at = now() - interval '1 hour'
                where email = 'committed@example.com'
                """)
            // A claim whose shard never committed (the gateway died after claiming).
            let never = try await shards[0].signUpAnonymous()
            _ = try await shards.directory.admin.query(
                """
                insert into directory.emails (email, shard, user_id, state, claimed_at)
                values ('never@example.com', 1, $1, 'pending', now() - interval '1 hour')
                """, [never.userID])
            // A fresh claim (a link in progress) and another shard's old one: left alone.
            _ = try await shards.directory.admin.query(
                """
                insert into directory.emails (email, shard, user_id, state, claimed_at) values
                    ('fresh@example.com', 1, $1, 'pending', now()),
                    ('other@example.com', 2, $1, 'pending', now() - interval '1 hour')
                """, [UUID().uuidString.lowercased()])
            // The claim blocks the email meanwhile, on either shard.
            let blocked = try await shards[1].link(
                try await shards[1].signUpAnonymous(), email: "never@example.com", password: password)
            #expect(blocked.status == 409 && blocked.code == "email_in_use", "\(blocked)")

            let settled = await shards[0].gateway.reconcileEmailClaims(olderThanSeconds: 600)
            #expect(settled == 2)
            #expect(try await shards.row("committed@example.com")?.state == "linked")
            #expect(try await shards.row("never@example.com") == nil)
            #expect(try await shards.row("fresh@example.com")?.state == "pending")
            #expect(try await shards.row("other@example.com")?.state == "pending", "only shard 2 settles its own")
            #expect(await shards[0].gateway.reconcileEmailClaims(olderThanSeconds: 600) == 0)
            #expect(committed.userID == (try await shards.row("committed@example.com")?.user))

            let freed = try await shards[1].link(
                try await shards[1].signUpAnonymous(), email: "never@example.com", password: password)
            #expect(freed.status == 200, "\(freed)")
        }
    }

    @Test func aDirectoryThatDoesNotAnswerChangesNothing() async throws {
        try await AccountsDatabase.with { database in
            try await database.admin.execute("select ferry.set_shard(1)")
            let closed = try freePort()
            try await withStartedGateway(
                databaseURL: database.gatewayURL,
                arguments: ["--directory-database-url", "postgresql://ferry_gateway@127.0.0.1:\(closed)/directory"]
            ) { gateway, port in
                let server = AccountsGateway(database: database, gateway: gateway, port: port)
                let phone = try await server.signUpAnonymous()
                let refused = try await server.link(phone, email: "down@example.com", password: password)
                #expect(refused.status == 503 && refused.code == "directory_unavailable", "\(refused)")
                #expect(try await database.value("select email from ferry.users where id = $1", [phone.userID]) == nil)
                #expect(try await server.me(phone.accessToken).value("user", "is_anonymous") as? Bool == true)
            }
        }
    }

    @Test func withConfirmationWhoeverConfirmsFirstOwnsTheEmail() async throws {
        let smtp = try SMTPTestServer()
        try await withDirectoryShards(arguments: ["--smtp-url", smtp.url, "--email-confirmation", "required"]) {
            shards in
            let onA = try await shards[0].signUpAnonymous()
            let onB = try await shards[1].signUpAnonymous()
            // Unconfirmed, both may link it: nothing is claimed yet.
            #expect(try await shards[0].link(onA, email: "bea@example.org", password: password).status == 200)
            let mailA = try #require(try await smtp.mail(to: "bea@example.org").code)
            #expect(try await shards[1].link(onB, email: "bea@example.org", password: password).status == 200)
            #expect(try await shards.row("bea@example.org") == nil)
            _ = try await smtp.mail(to: "bea@example.org", count: 2)
            let codes = smtp.mails(to: "bea@example.org").compactMap(\.code)
            let mailB = try #require(codes.first { $0 != mailA }, "\(codes)")

            let first = try await shards[1].call(
                "POST", "/v1/auth/confirm", token: onB.accessToken, json: ["code": mailB])
            #expect(first.status == 200, "\(first)")
            #expect(try await shards.row("bea@example.org")?.shard == 2)
            #expect(try await shards.row("bea@example.org")?.state == "linked")
            let second = try await shards[0].call(
                "POST", "/v1/auth/confirm", token: onA.accessToken, json: ["code": mailA])
            #expect(second.status == 409 && second.code == "email_in_use", "\(second)")
            #expect(try await shards[0].me(onA.accessToken).value("user", "email_confirmed") as? Bool == false)
        }
    }

    /// A sign-in (no device session) reaching the wrong shard is forwarded to the shard the
    /// directory names, which answers;
    /// a request that says it was forwarded is answered where it lands.
    @Test func aSignInReachingTheWrongShardIsAnsweredByTheAccountsShard() async throws {
        try await withDirectoryShards { shards in
            let account = try await shards[1].emailAccount("cy@example.com")
            let device = UUID().uuidString.lowercased()
            let signedIn = try await shards[0].signIn(email: "cy@example.com", password: password, device: device)
            #expect(signedIn.status == 200, "\(signedIn)")
            #expect(signedIn.string("user", "id") == account.userID)
            #expect(signedIn.string("session", "refresh_token")?.hasPrefix("2.") == true)
            let wrong = try await shards[0].signIn(email: "cy@example.com", password: "not the password")
            #expect(wrong.status == 401 && wrong.code == "invalid_credentials", "\(wrong)")
            // The account's shard counted the failure.
            let failures = try await shards[1].database.value("select count(*) from ferry.sign_in_attempts")
            #expect(failures != "0", "\(String(describing: failures))")
            // Never forwarded twice: a request marked forwarded is answered where it lands.
            let marked = try await shards[0].call(
                "POST", "/v1/auth/signin",
                json: ["email": "cy@example.com", "password": password, "device_id": device],
                headers: [("X-Ferry-Forwarded", "1")])
            #expect(marked.status == 401 && marked.code == "invalid_credentials", "\(marked)")
            // An email nobody has is answered here, as before.
            let nobody = try await shards[0].signIn(email: "nobody@example.com", password: password)
            #expect(nobody.status == 401, "\(nobody)")
        }
    }

    /// The account's shard trusts the forwarding gateways (`--trusted-proxies`), which send
    /// no PROXY header: a forwarded sign-in's per-address limits count the client, not the
    /// gateway that forwarded it.
    @Test func aForwardedSignInsLimitsCountTheClientsAddress() async throws {
        let arguments = ["--trusted-proxies", "127.0.0.1", "--failed-signins-per-hour", "2"]
        try await withDirectoryShards(arguments: arguments) { shards in
            for email in ["eve@example.com", "fay@example.com"] { _ = try await shards[1].emailAccount(email) }
            for _ in 0..<2 {
                let wrong = try await shards[0].signIn(
                    email: "eve@example.com", password: "not the password", source: "127.0.0.5")
                #expect(wrong.status == 401, "\(wrong)")
            }
            let addresses = try await shards[1].database.value(
                "select string_agg(distinct address, ',') from ferry.sign_in_attempts")
            #expect(addresses == "127.0.0.5")
            // That client's failures are spent, for any email; another client's are not.
            let spent = try await shards[0].signIn(
                email: "fay@example.com", password: "not the password", source: "127.0.0.5")
            #expect(spent.status == 429 && spent.code == "rate_limited", "\(spent)")
            let other = try await shards[0].signIn(
                email: "fay@example.com", password: "not the password", source: "127.0.0.6")
            #expect(other.status == 401, "\(other)")
        }
    }

    @Test func aShardThatDoesNotAnswerIsAClear503() async throws {
        try await withDirectoryShards { shards in
            // Shard 3 has no gateway: its URL is a closed port.
            _ = try await shards.directory.admin.query(
                "insert into directory.emails (email, shard, user_id, state, linked_at) values ($1, 3, $2, 'linked', now())",
                ["dee@example.com", UUID().uuidString.lowercased()])
            let answer = try await shards[0].signIn(email: "dee@example.com", password: password)
            #expect(answer.status == 503 && answer.code == "shard_unavailable", "\(answer)")
        }
    }
}
