import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// The limits that keep the password hasher from being monopolised and the failed-sign-in
/// limit exact under a burst, over real HTTP against a real PostgreSQL: what was hashed is
/// read from the hasher's own count (``PasswordHasher/hashesComputed``) and from
/// `ferry.sign_in_attempts`. Clients at different addresses bind their own end to another
/// loopback address (127.0.0.2, …), which the gateway sees as the client's.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct PasswordLimitsTests {
    /// Every password check may run at once on one gateway, so that only the limits kept in
    /// PostgreSQL stand between a burst and the hasher.
    static let unboundedInFlight = ["--password-hashes-per-address", "1000", "--password-hashes-per-email", "1000"]

    /// `count` sign-ins at once for `email` with a wrong password, spread over `gateways`
    /// in turn; their statuses, sorted.
    static func burstOfWrongPasswords(_ gateways: [AccountsGateway], email: String, count: Int) async throws -> [Int] {
        try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<count {
                let gateway = gateways[index % gateways.count]
                group.addTask { try await gateway.signIn(email: email, password: "a wrong password").status }
            }
            return try await group.reduce(into: []) { $0.append($1) }.sorted()
        }
    }

    static func hashes(_ gateways: [AccountsGateway]) -> Int {
        gateways.map(\.gateway.accounts.passwords.hashesComputed).reduce(0, +)
    }

    // MARK: - Failed sign-ins

    // The bursts use a limit of 10, not the default 20: each check the limit lets through
    // is hashed (about 70 ms of a core, far more on a loaded machine) within the client's
    // 15 s receive timeout.

    @Test func aBurstOfWrongPasswordsChecksAtMostTheLimit() async throws {
        try await withAccountsGateway(arguments: ["--failed-signins-per-hour", "10"] + Self.unboundedInFlight) {
            harness in
            _ = try await harness.emailAccount("burst@example.com", password: "the right password")
            let before = Self.hashes([harness])

            let statuses = try await Self.burstOfWrongPasswords([harness], email: "burst@example.com", count: 80)
            #expect(statuses.filter { $0 == 401 }.count == 10, "\(statuses)")
            #expect(statuses.filter { $0 == 429 }.count == 70, "\(statuses)")
            #expect(Self.hashes([harness]) - before == 10, "only the reserved attempts are hashed")
            let failed = try await harness.database.value(
                "select count(*) from ferry.sign_in_attempts where email = 'burst@example.com' and outcome = 'failed'")
            #expect(failed == "10")
        }
    }

    @Test func theFailedSignInCountSurvivesARestartAndTwoGatewaysShareIt() async throws {
        try await AccountsDatabase.with { database in
            let arguments = ["--failed-signins-per-hour", "3"]
            let first = TestGateway(databaseURL: database.gatewayURL, arguments: arguments)
            let second = TestGateway(databaseURL: database.gatewayURL, arguments: arguments)
            func harness(_ gateway: TestGateway) async throws -> AccountsGateway {
                let (running, port) = try await gateway.started()
                return AccountsGateway(database: database, gateway: running, port: port)
            }
            try await first.start()
            try await second.start()
            do {
                _ = try await harness(first).emailAccount("kept@example.com", password: "the right password")
                for _ in 0..<2 {
                    let response = try await harness(first).signIn(email: "kept@example.com", password: "wrong one!")
                    #expect(response.status == 401, "\(response)")
                }
                await first.stop()
                try await first.start()
                let third = try await harness(second).signIn(email: "kept@example.com", password: "wrong one!")
                #expect(third.status == 401, "the second gateway counts the first one's failures: \(third)")

                for gateway in [first, second] {
                    let response = try await harness(gateway).signIn(
                        email: "kept@example.com", password: "the right password", source: "127.0.0.2")
                    #expect(response.status == 429, "after a restart and on either gateway: \(response)")
                    #expect(
                        response.string("error", "message")?.hasPrefix(
                            "too many failed sign-ins for this email (3 per hour); retry after ") == true)
                    let retryAfter = response.header("Retry-After").flatMap(Int.init)
                    #expect(retryAfter.map { (3500...3600).contains($0) } == true, "\(String(describing: retryAfter))")
                }
            } catch {
                await first.stop()
                await second.stop()
                throw error
            }
            await first.stop()
            await second.stop()
        }
    }

    @Test func aBurstOverTwoGatewaysChecksAtMostTheLimit() async throws {
        try await AccountsDatabase.with { database in
            let arguments = ["--failed-signins-per-hour", "10"] + Self.unboundedInFlight
            try await withStartedGateway(databaseURL: database.gatewayURL, arguments: arguments) { one, onePort in
                try await withStartedGateway(databaseURL: database.gatewayURL, arguments: arguments) { two, twoPort in
                    let gateways = [
                        AccountsGateway(database: database, gateway: one, port: onePort),
                        AccountsGateway(database: database, gateway: two, port: twoPort),
                    ]
                    _ = try await gateways[0].emailAccount("shared@example.com", password: "the right password")
                    let before = Self.hashes(gateways)

                    let statuses = try await Self.burstOfWrongPasswords(
                        gateways, email: "shared@example.com", count: 80)
                    #expect(statuses.filter { $0 == 401 }.count == 10, "\(statuses)")
                    #expect(statuses.filter { $0 == 429 }.count == 70, "\(statuses)")
                    #expect(Self.hashes(gateways) - before == 10, "both gateways together hash only the limit")
                }
            }
        }
    }

    // MARK: - Successful sign-ins

    @Test func signInsPerAccountPerHourAreLimitedBeforeHashing() async throws {
        try await withAccountsGateway(arguments: ["--signins-per-account-per-hour", "3"]) { harness in
            _ = try await harness.emailAccount("busy@example.com", password: "the right password")
            _ = try await harness.emailAccount("calm@example.com", password: "the right password")
            let before = Self.hashes([harness])
            for _ in 0..<3 {
                let response = try await harness.signIn(email: "busy@example.com", password: "the right password")
                #expect(response.status == 200, "\(response)")
            }
            // From any address, right password or wrong: nothing more is hashed for the account.
            for (password, source) in [("the right password", "127.0.0.2"), ("a wrong password", "127.0.0.3")] {
                let response = try await harness.signIn(email: "busy@example.com", password: password, source: source)
                #expect(response.status == 429, "\(response)")
                #expect(
                    response.string("error", "message")?.hasPrefix(
                        "too many sign-ins to this account (3 per hour); retry after ") == true, "\(response)")
                #expect(response.header("Retry-After").flatMap(Int.init).map { $0 > 3500 } == true)
            }
            #expect(Self.hashes([harness]) - before == 3)
            let sessions = try await harness.database.value(
                "select count(*) from ferry.sessions s join ferry.users u on u.id = s.user_id "
                    + "where u.email = 'busy@example.com'")
            #expect(sessions == "4", "the sign-up's session and three sign-ins")
            let other = try await harness.signIn(email: "calm@example.com", password: "the right password")
            #expect(other.status == 200, "another account has its own allowance: \(other)")
        }
    }

    // MARK: - Hashes in flight

    @Test func aLinkFloodIsRefused429BeforeHashingAndAVictimStillSignsIn() async throws {
        try await withAccountsGateway { harness in
            _ = try await harness.emailAccount("taken@example.com", password: "the owner's password")
            _ = try await harness.emailAccount("victim@example.com", password: "the victim's password")
            let attacker = try await harness.signUpAnonymous()
            let before = Self.hashes([harness])

            // (is it the victim's, the answer)
            let answers = try await withThrowingTaskGroup(of: (Bool, APIResponse).self) { group in
                for _ in 0..<24 {
                    group.addTask {
                        (
                            false,
                            try await harness.link(attacker, email: "taken@example.com", password: "not the owner's")
                        )
                    }
                }
                group.addTask {
                    try await Task.sleep(for: .milliseconds(100))
                    let response = try await harness.signIn(
                        email: "victim@example.com", password: "the victim's password", source: "127.0.0.2")
                    return (true, response)
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let victim = answers.first { $0.0 }?.1
            let statuses = answers.filter { !$0.0 }.map(\.1)
            #expect(victim?.status == 200, "the victim's sign-in: \(String(describing: victim))")
            let conflicts = statuses.filter { $0.status == 409 }
            let refused = statuses.filter { $0.status == 429 }
            #expect(conflicts.count + refused.count == 24)
            #expect(refused.count >= 1, "24 at once cannot all be hashed at once")
            for response in refused {
                #expect(response.header("Retry-After") == "1", "\(response)")
                #expect(response.code == "rate_limited")
            }
            #expect(Self.hashes([harness]) - before == conflicts.count + 1, "a hash per 409 and the victim's check")
            #expect(harness.gateway.accounts.passwordsInFlight.perAddress.keysHolding == 0)
            #expect(harness.gateway.accounts.passwordsInFlight.perEmail.keysHolding == 0)
            #expect(harness.gateway.requests.perDevice.keysHolding == 0)
        }
    }

    @Test func aSecondPasswordCheckFromOneAddressIsRefused429WithoutHashing() async throws {
        try await withAccountsGateway { harness in
            _ = try await harness.emailAccount("one@example.com", password: "the right password")
            _ = try await harness.emailAccount("two@example.com", password: "the right password")
            let before = Self.hashes([harness])
            let statuses = try await withThrowingTaskGroup(of: APIResponse.self) { group in
                for email in ["one@example.com", "two@example.com"] {
                    for _ in 0..<4 {
                        group.addTask { try await harness.signIn(email: email, password: "the right password") }
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let signedIn = statuses.filter { $0.status == 200 }.count
            let refused = statuses.filter { $0.status == 429 }
            #expect(signedIn + refused.count == 8, "\(statuses)")
            #expect(signedIn >= 1)
            #expect(refused.count >= 1, "eight at once from one address cannot all hash at once")
            #expect(
                refused.allSatisfy {
                    $0.string("error", "message")?.hasPrefix("this address already has 1 password checks in flight")
                        == true
                        || $0.string("error", "message")?.hasPrefix(
                            "this email already has 1 password checks in flight")
                            == true
                }, "\(refused)")
            #expect(Self.hashes([harness]) - before == signedIn)
        }
    }
}
