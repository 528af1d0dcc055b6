import FerryAuth
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// PROTOCOL.md's refresh rule over real HTTP: the token rotated last is good again within
/// the grace window (a lost answer's retry, concurrent refreshes), reuse after it revokes
/// the session, a session keeps two tokens at most, and refreshes are rate limited.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct RefreshGraceTests {
    @Test func aLostAnswerRetriedWithinTheWindowGetsTheSameWorkingSession() async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            let lost = try await harness.refresh(session.refreshToken)
            #expect(lost.status == 200, "\(lost)")
            let retried = try await harness.refresh(session.refreshToken)
            #expect(retried.status == 200, "the retry within the window: \(retried)")
            let first = try harness.session(from: lost, device: session.deviceID)
            let again = try harness.session(from: retried, device: session.deviceID)
            #expect(again.sessionID == session.sessionID && again.userID == session.userID)
            #expect(again.refreshToken == first.refreshToken, "the same successor, whichever answer arrived")
            #expect(try await harness.me(again.accessToken).status == 200)
            #expect(try await harness.me(session.accessToken).status == 200, "the session was not revoked")
            let onward = try await harness.refresh(again.refreshToken)
            #expect(onward.status == 200, "the session refreshes on: \(onward)")
        }
    }

    @Test func aRefreshWhoseConnectionResetAfterSendingIsRetried() async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            let body = Array(try JSONSerialization.data(withJSONObject: ["refresh_token": session.refreshToken]))
            let client = try HTTPTestClient(port: harness.port)
            var head = "POST /v1/auth/refresh HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            head += "Content-Length: \(body.count)\r\n\r\n"
            try client.send(Array(head.utf8) + body)
            client.reset()
            try await eventually("the reset refresh rotated the token") {
                try await harness.database.value(
                    "select count(*) from ferry.refresh_tokens where session_id = $1 and used_at is not null",
                    [session.sessionID]) == "1"
            }
            let retried = try await harness.refresh(session.refreshToken)
            #expect(retried.status == 200, "\(retried)")
            let again = try harness.session(from: retried, device: session.deviceID)
            #expect(again.sessionID == session.sessionID)
            #expect(try await harness.refresh(again.refreshToken).status == 200)
        }
    }

    @Test(arguments: [2, 5]) func concurrentRefreshesOfOneTokenAllGetAWorkingSession(count: Int) async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            let answers = try await withThrowingTaskGroup(of: APIResponse.self) { group in
                for _ in 0..<count { group.addTask { try await harness.refresh(session.refreshToken) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.map(\.status) == Array(repeating: 200, count: count), "\(answers)")
            let sessions = try answers.map { try harness.session(from: $0, device: session.deviceID) }
            #expect(Set(sessions.map(\.refreshToken)).count == 1, "one successor for all")
            #expect(Set(sessions.map(\.sessionID)) == [session.sessionID])
            for refreshed in sessions { #expect(try await harness.me(refreshed.accessToken).status == 200) }
            #expect(try await harness.refresh(sessions[0].refreshToken).status == 200)
            #expect(
                try await harness.database.value(
                    "select count(*) from ferry.refresh_tokens where session_id = $1", [session.sessionID]) == "2")
        }
    }

    @Test func aRotatedTokenPresentedAfterTheWindowRevokesTheSession() async throws {
        try await withAccountsGateway(arguments: ["--refresh-grace", "1"]) { harness in
            let session = try await harness.signUpAnonymous()
            let rotated = try harness.session(
                from: try await harness.refresh(session.refreshToken), device: session.deviceID)
            try await Task.sleep(for: .milliseconds(1500))
            let reused = try await harness.refresh(session.refreshToken)
            #expect(reused.status == 401 && reused.code == "refresh_token_reused", "\(reused)")
            #expect(try await harness.me(rotated.accessToken).code == "session_revoked")
            #expect(try await harness.refresh(rotated.refreshToken).code == "session_revoked")
        }
    }

    @Test func anOlderTokenNoLongerStoredStillRevokesItsSession() async throws {
        try await withAccountsGateway { harness in
            // The session's first token, and a rotation's token: each presented once the
            // session has rotated past it twice, when neither is in the table any more.
            for stale in [0, 1] {
                var tokens = [try await harness.signUpAnonymous()]
                for _ in 0..<3 {
                    let next = try await harness.refresh(tokens.last!.refreshToken)
                    tokens.append(try harness.session(from: next, device: tokens[0].deviceID))
                }
                #expect(
                    try await harness.database.value(
                        "select count(*) from ferry.refresh_tokens where token_hash = $1",
                        [RefreshToken.hash(tokens[stale].refreshToken)]) == "0")
                let reused = try await harness.refresh(tokens[stale].refreshToken)
                #expect(reused.status == 401 && reused.code == "refresh_token_reused", "token \(stale): \(reused)")
                #expect(try await harness.me(tokens[3].accessToken).code == "session_revoked")
            }
            let forged = try await harness.refresh(RefreshToken.generate())
            #expect(forged.status == 401 && forged.code == "unauthorized", "an unknown token revokes nothing")
        }
    }

    @Test func aSessionKeepsTwoTokensHoweverOftenItRefreshes() async throws {
        try await withAccountsGateway(arguments: ["--refreshes-per-session", "1000"]) { harness in
            let other = try await harness.signUpAnonymous()
            var session = try await harness.signUpAnonymous()
            for round in 0..<60 {
                let next = try await harness.refresh(session.refreshToken)
                try #require(next.status == 200, "refresh \(round): \(next)")
                session = try harness.session(from: next, device: session.deviceID)
            }
            #expect(
                try await harness.database.rows(
                    "select session_id::text, count(*)::text from ferry.refresh_tokens group by 1 order by 2")
                    == [[other.sessionID, "1"], [session.sessionID, "2"]])
        }
    }

    @Test func refreshesPastTheSessionsLimitAre429WithRetryAfter() async throws {
        try await withAccountsGateway(arguments: ["--refreshes-per-session", "3"]) { harness in
            var session = try await harness.signUpAnonymous()
            for _ in 0..<3 {
                session = try harness.session(
                    from: try await harness.refresh(session.refreshToken), device: session.deviceID)
            }
            let asked = ContinuousClock.now
            let refused = try await harness.refresh(session.refreshToken)
            #expect(ContinuousClock.now - asked >= .milliseconds(900), "a refusal is held a second")
            #expect(refused.status == 429 && refused.code == "rate_limited" && refused.retryable == true, "\(refused)")
            #expect(Int(refused.header("Retry-After") ?? "") ?? 0 >= 1)
            // Nothing was rotated: the refused token is still the session's current one.
            #expect(
                try await harness.database.value(
                    "select used_at is null from ferry.refresh_tokens where token_hash = $1",
                    [RefreshToken.hash(session.refreshToken)]) == "t")
            let otherSession = try await harness.signUpAnonymous()
            #expect(
                try await harness.refresh(otherSession.refreshToken).status == 200, "another session is not limited")
        }
    }

    @Test func refreshesPastTheAddressLimitAre429() async throws {
        try await withAccountsGateway(arguments: ["--refreshes-per-address", "3"]) { harness in
            var sessions: [TestSession] = []
            for _ in 0..<4 { sessions.append(try await harness.signUpAnonymous()) }
            for session in sessions.prefix(3) {
                #expect(try await harness.refresh(session.refreshToken).status == 200)
            }
            let refused = try await harness.refresh(sessions[3].refreshToken)
            #expect(refused.status == 429 && refused.code == "rate_limited", "\(refused)")
            #expect(refused.header("Retry-After") != nil)
            let elsewhere = try await harness.call(
                "POST", "/v1/auth/refresh", json: ["refresh_token": sessions[3].refreshToken], source: "127.0.0.2")
            #expect(elsewhere.status == 200, "another address is not limited: \(elsewhere)")
        }
    }
}
