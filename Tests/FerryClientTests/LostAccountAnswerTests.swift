import FerryTestSupport
import Foundation
import Testing

@testable import FerryClient

/// Account steps whose answer is lost after the server committed them (a proxy drops
/// the connection once the answer starts): called again, each learns its outcome from
/// the server and completes, instead of failing for good.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct LostAccountAnswerTests {
    /// A link the server committed: the retry's `409 already_linked` is resolved by
    /// asking the server who the session is, and the device is linked.
    @Test func aLinkWhoseAnswerIsLostCompletesWhenCalledAgain() async throws {
        try await DemoGateway.with { gateway in
            let proxy = try AnswerLosingProxy(to: gateway.port)
            defer { proxy.stop() }
            let ferry = try await proxiedClient(gateway, through: proxy, gateway.device("phone"))
            let user = try #require(ferry.user?.id)
            proxy.loseAnswers(to: "POST /v1/auth/link")
            // Lost: it throws (unless the HTTP stack's own retry already met the link).
            try? await ferry.link(email: "lost-link@example.com", password: "correct horse")
            #expect(proxy.answersLost == 1)
            try await ferry.link(email: "lost-link@example.com", password: "correct horse")
            #expect(ferry.user?.id == user)
            #expect(ferry.user?.isAnonymous == false)
            #expect(ferry.user?.email == "lost-link@example.com")
            await ferry.close()
            // A new client on the folder reads the linked session.
            let reopened = try await proxiedClient(gateway, through: proxy, gateway.device("phone"))
            #expect(reopened.user?.isAnonymous == false)
            await reopened.close()
        }
    }

    /// A sign-in the server committed (so this device's anonymous session is revoked):
    /// the retry signs in without the dead session instead of failing `401`.
    @Test func aSignInWhoseAnswerIsLostCompletesWhenCalledAgain() async throws {
        try await DemoGateway.with { gateway in
            let proxy = try AnswerLosingProxy(to: gateway.port)
            defer { proxy.stop() }
            let owner = try await proxiedClient(gateway, through: proxy, gateway.device("phone"))
            try await owner.link(email: "lost-signin@example.com", password: "correct horse")
            let account = try #require(owner.user?.id)
            await owner.close()

            let tablet = try await proxiedClient(gateway, through: proxy, gateway.device("tablet"))
            proxy.loseAnswers(to: "POST /v1/auth/signin")
            try? await tablet.signIn(email: "lost-signin@example.com", password: "correct horse")
            #expect(proxy.answersLost == 1)
            try await tablet.signIn(email: "lost-signin@example.com", password: "correct horse")
            #expect(tablet.user?.id == account)
            #expect(tablet.user?.isAnonymous == false)
            try await tablet.sync()
            await tablet.close()
        }
    }
}
