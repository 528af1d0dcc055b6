import FerryAuth
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// A cluster set to a shard (`ferry.set_shard`) mints user ids of its shard and issues
/// refresh tokens that name it (`<shard>.<token>`), which refresh as before; an unsharded
/// one issues bare tokens, as before sharding.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct ShardTests {
    @Test func aSignUpOnShard7MintsItsIdAndRefreshTokensThatNameIt() async throws {
        try await withAccountsGateway { harness in
            try await harness.database.admin.execute("select ferry.set_shard(7)")
            let session = try await harness.signUpAnonymous()
            #expect(Shard.of(try #require(UUID(uuidString: session.userID))) == 7, "\(session.userID)")
            #expect(session.refreshToken.hasPrefix("7."), "\(session.refreshToken)")
            let refreshed = try harness.session(
                from: try await harness.refresh(session.refreshToken), device: session.deviceID)
            #expect(refreshed.refreshToken.hasPrefix("7.") && refreshed.userID == session.userID)
            let retried = try harness.session(
                from: try await harness.refresh(session.refreshToken), device: session.deviceID)
            #expect(retried.refreshToken == refreshed.refreshToken, "the grace window's answer names the shard too")
            #expect(try await harness.refresh(refreshed.refreshToken).status == 200)
        }
    }

    @Test func aSignInOnAShardIssuesATokenNamingIt() async throws {
        try await withAccountsGateway { harness in
            try await harness.database.admin.execute("select ferry.set_shard(300)")
            let account = try await harness.emailAccount("shard@example.com")
            #expect(account.refreshToken.hasPrefix("300."), "\(account.refreshToken)")
            let device = UUID().uuidString.lowercased()
            let signedIn = try harness.session(
                from: try await harness.signIn(
                    email: "shard@example.com", password: "correct horse battery", device: device),
                device: device)
            #expect(signedIn.refreshToken.hasPrefix("300."), "\(signedIn.refreshToken)")
            #expect(try await harness.refresh(signedIn.refreshToken).status == 200)
        }
    }

    @Test func anUnshardedClusterIssuesBareTokensAsBefore() async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            #expect(Shard.of(try #require(UUID(uuidString: session.userID))) == 0)
            #expect(session.refreshToken.utf8.count == 43 && !session.refreshToken.contains("."))
            #expect(try await harness.refresh(session.refreshToken).status == 200)
        }
    }
}
