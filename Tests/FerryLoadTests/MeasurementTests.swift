import FerryLoad
import FerryTestSupport
import Testing

@Suite(.tagSelection) struct CueLatencyTests {
    private func event(_ user: Int, _ milliseconds: UInt64) -> CueLatency.Event {
        CueLatency.Event(user: user, at: milliseconds * 1_000_000)
    }

    @Test func eachWriteTakesTheFirstArrivalForItsUserAfterIt() {
        let writes = [event(1, 10), event(2, 11), event(1, 20)]
        let arrivals = [event(2, 14), event(1, 12), event(1, 9), event(1, 23), event(1, 30)]
        #expect(CueLatency.match(writes: writes, arrivals: arrivals) == [2, 3, 3])
    }

    @Test func anArrivalAfterTheUsersNextWriteBelongsToThatWrite() {
        // The first write's cue never came; the one at 25 answers the second write only.
        let writes = [event(1, 10), event(1, 20)]
        #expect(CueLatency.match(writes: writes, arrivals: [event(1, 25)]) == [nil, 5])
    }

    @Test func aUserWithoutArrivalsIsMissing() {
        #expect(CueLatency.match(writes: [event(3, 1)], arrivals: [event(4, 2)]) == [nil])
    }
}

@Suite(.tagSelection) struct PercentilesTests {
    @Test func nearestRank() {
        let values = (1...200).map(Double.init)
        let summary = Percentiles(values.shuffled())
        #expect(summary == Percentiles(values))
        #expect(summary?.p50 == 100)
        #expect(summary?.p99 == 198)
        #expect(summary?.max == 200)
        #expect(Percentiles([]) == nil)
        #expect(Percentiles([7])?.p99 == 7)
    }
}

@Suite(.tagSelection) struct SignedUpUserTests {
    @Test func readsTheSignUpAnswer() {
        let body =
            #"{"user":{"id":"u-1","is_anonymous":true,"email":null},"session":{"access_token":"a.b.c","refresh_token":"r","token_type":"bearer","expires_in":3600}}"#
        #expect(SignedUpUser(signUpAnswer: Array(body.utf8)) == SignedUpUser(userID: "u-1", accessToken: "a.b.c"))
        #expect(SignedUpUser(signUpAnswer: Array(#"{"error":{"code":"rate_limited"}}"#.utf8)) == nil)
    }
}
