import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

/// PROTOCOL.md, `POST /v1/auth/signin` with the device's anonymous session as Bearer:
/// what happens to the rows the device made before signing in, with real rows in a
/// registered table (`notes`, seeded with SQL).
@Suite(.hangLimit, .tags(.database), .tagSelection) struct FirstSignInTests {
    static let email = "cloud@example.com"
    static let password = "the cloud password"

    /// An email account (signed up on its own device) and an anonymous user on the
    /// device about to sign in.
    struct Accounts {
        let cloud: TestSession
        let device: TestSession
    }

    func accounts(_ harness: AccountsGateway) async throws -> Accounts {
        Accounts(
            cloud: try await harness.emailAccount(Self.email, password: Self.password),
            device: try await harness.signUpAnonymous())
    }

    /// Signs in to the email account on the anonymous user's device, with its token.
    func signIn(_ harness: AccountsGateway, _ accounts: Accounts, resolve: String? = nil) async throws -> APIResponse {
        try await harness.signIn(
            email: Self.email, password: Self.password, device: accounts.device.deviceID,
            bearer: accounts.device.accessToken, resolve: resolve)
    }

    /// Checks a successful sign-in answer: the email account, a session on this device, `reset`.
    func expectSignedIn(_ response: APIResponse, _ accounts: Accounts, reset: Bool) {
        #expect(response.status == 200, "\(response)")
        #expect(response.string("user", "id") == accounts.cloud.userID)
        #expect(response.value("user", "is_anonymous") as? Bool == false)
        #expect(response.string("user", "email") == Self.email)
        #expect(response.value("reset") as? Bool == reset)
        let token = response.string("session", "access_token") ?? ""
        #expect(decodeClaims(token)["did"] as? String == accounts.device.deviceID)
    }

    /// The anonymous user is gone and its token answers `session_revoked`.
    func expectAnonymousUserGone(_ harness: AccountsGateway, _ accounts: Accounts) async throws {
        #expect(try await harness.database.userExists(accounts.device.userID) == false)
        #expect(try await harness.database.notes(of: accounts.device.userID).isEmpty)
        let me = try await harness.me(accounts.device.accessToken)
        #expect(me.status == 401)
        #expect(me.code == "session_revoked")
    }

    // MARK: - No rows on the device

    @Test func anonymousUserWithoutRowsIsDeletedSilently() async throws {
        try await withAccountsGateway(createNotes: true) { harness in
            let accounts = try await accounts(harness)
            try await harness.database.seedNotes(owner: accounts.cloud.userID, [("c1", "cloud one")])
            let response = try await signIn(harness, accounts)
            expectSignedIn(response, accounts, reset: false)
            try await expectAnonymousUserGone(harness, accounts)
            #expect(try await harness.database.notes(of: accounts.cloud.userID) == [["c1", "cloud one", "false"]])
        }
    }

    @Test func anonymousUserWithOnlyTombstonesIsDeletedSilentlyWithItsTombstones() async throws {
        try await withAccountsGateway(createNotes: true) { harness in
            let accounts = try await accounts(harness)
            try await harness.database.seedNotes(owner: accounts.device.userID, [("gone", "deleted")], deleted: true)
            let response = try await signIn(harness, accounts)
            expectSignedIn(response, accounts, reset: false)
            try await expectAnonymousUserGone(harness, accounts)
        }
    }

    // MARK: - Rows on the device

    @Test func deviceRowsWithoutResolveAnswerResolutionRequiredAndChangeNothing() async throws {
        try await withAccountsGateway(createNotes: true) { harness in
            let accounts = try await accounts(harness)
            let database = harness.database
            try await database.seedNotes(owner: accounts.device.userID, [("d1", "one"), ("d2", "two")])
            try await database.seedNotes(owner: accounts.device.userID, [("d3", "old")], deleted: true)
            try await database.seedNotes(owner: accounts.cloud.userID, [("c1", "a"), ("c2", "b"), ("c3", "c")])
            try await database.seedNotes(owner: accounts.cloud.userID, [("c4", "old")], deleted: true)
            let notes = try await database.notes()
            let state = try await database.accountState()

            let response = try await signIn(harness, accounts)
            #expect(response.status == 409, "\(response)")
            #expect(response.code == "resolution_required")
            #expect(response.retryable == false)
            #expect(response.value("error", "device_rows") as? Int == 2, "tombstones are not counted")
            #expect(response.value("error", "cloud_rows") as? Int == 3, "tombstones are not counted")

            #expect(try await database.notes() == notes)
            #expect(try await database.accountState() == state, "no session opened, no user deleted")
            #expect(try await harness.me(accounts.device.accessToken).status == 200)

            let unknown = try await signIn(harness, accounts, resolve: "keep_both")
            #expect(unknown.status == 400)
            #expect(unknown.code == "invalid_request")
            #expect(try await database.notes() == notes)
        }
    }

    @Test func keepCloudDeletesTheAnonymousUserAndItsRowsAndAsksForAReset() async throws {
        try await withAccountsGateway(createNotes: true) { harness in
            let accounts = try await accounts(harness)
            let database = harness.database
            try await database.seedNotes(owner: accounts.device.userID, [("d1", "device one"), ("both", "device")])
            try await database.seedNotes(owner: accounts.cloud.userID, [("c1", "cloud one"), ("both", "cloud")])
            try await database.seedNotes(owner: accounts.cloud.userID, [("c2", "old")], deleted: true)
            let cloudNotes = try await database.notes(of: accounts.cloud.userID)

            let response = try await signIn(harness, accounts, resolve: "keep_cloud")
            expectSignedIn(response, accounts, reset: true)
            try await expectAnonymousUserGone(harness, accounts)
            #expect(try await database.notes(of: accounts.cloud.userID) == cloudNotes, "cloud rows untouched")
        }
    }

    @Test func keepDeviceTombstonesCloudRowsAndReownsDeviceRows() async throws {
        try await withAccountsGateway(createNotes: true) { harness in
            let accounts = try await accounts(harness)
            let database = harness.database
            try await database.seedNotes(owner: accounts.device.userID, [("d1", "device one"), ("both", "device")])
            try await database.seedNotes(owner: accounts.cloud.userID, [("c1", "cloud one"), ("both", "cloud")])
            let bystander = try await harness.signUpAnonymous()
            try await database.seedNotes(owner: bystander.userID, [("both", "someone else's")])

            let response = try await signIn(harness, accounts, resolve: "keep_device")
            expectSignedIn(response, accounts, reset: false)
            try await expectAnonymousUserGone(harness, accounts)
            #expect(
                try await database.notes(of: accounts.cloud.userID) == [
                    ["both", "device", "false"],  // a key in both keeps the device's version
                    ["c1", "cloud one", "true"],  // cloud-only rows become tombstones
                    ["d1", "device one", "false"],  // device rows move to the email account
                ])
            #expect(try await database.notes(of: bystander.userID) == [["both", "someone else's", "false"]])
        }
    }

    // MARK: - A crash inside the merge

    @Test func connectionKilledInsideKeepDeviceLeavesBothAccountsAsTheyWereAndAnswers503() async throws {
        try await withAccountsGateway(createNotes: true) { harness in
            let accounts = try await accounts(harness)
            let database = harness.database
            try await database.seedNotes(owner: accounts.device.userID, [("d1", "device one"), ("both", "device")])
            try await database.seedNotes(owner: accounts.cloud.userID, [("c1", "cloud one"), ("both", "cloud")])
            let notes = try await database.notes()
            let state = try await database.accountState()

            // Another connection holds the cloud rows, so the merge stalls on them
            // after it has locked both users and counted the rows.
            let locker = try await database.database.connect()
            try await locker.execute("begin")
            _ = try await locker.query(
                "select 1 from public.notes where user_id = $1 for update", [accounts.cloud.userID])

            async let answer = signIn(harness, accounts, resolve: "keep_device")
            let merging = try await database.gatewayBackendWaitingOnALock(running: "ferry.sign_in")
            let pid = try #require(merging, "the keep_device merge never waited on the locked rows")
            #expect(try await database.value("select pg_terminate_backend($1::int)", [pid]) == "t")

            let response = try await answer
            _ = try await locker.execute("rollback")
            await locker.close()
            #expect(response.status == 503, "\(response)")
            #expect(response.code == "unavailable")
            #expect(response.retryable == true)

            #expect(try await database.notes() == notes, "every row as it was")
            #expect(try await database.accountState() == state, "both accounts as they were")
            #expect(try await harness.me(accounts.device.accessToken).status == 200)

            // Retrying (as the 503 invites) completes the merge.
            let retried = try await signIn(harness, accounts, resolve: "keep_device")
            expectSignedIn(retried, accounts, reset: false)
            try await expectAnonymousUserGone(harness, accounts)
        }
    }
}
