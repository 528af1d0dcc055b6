import FerryLoop
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// PROTOCOL.md "Streams" against an in-process gateway on a migrated database: who may
/// open a stream, cues end to end (independent Python clients for both transports), the
/// lifecycle's close codes, coalescing, the listener's gap, several gateways.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct StreamTests {
    static let transports = StreamTestClient.Transport.allCases

    // MARK: - Independent clients

    @Test(arguments: transports)
    func independentClientGetsACueAndPullsTheRow(transport: StreamTestClient.Transport) async throws {
        try await withAccountsGateway(examples: ["tasks"]) { harness in
            let url = "http://127.0.0.1:\(harness.port)"
            let name = transport == .webSocket ? "websocket" : "sse"
            let run = try await offload {
                try PythonScript.run(arguments: [PythonScript.path("stream_cues.py"), url, name])
            }
            #expect(run.status == 0, "stream_cues.py \(name) failed:\n\(run.output)")
            #expect(run.output.contains("every step answered as PROTOCOL.md says"), "\(run.output)")
        }
    }

    // MARK: - Opening

    @Test(arguments: transports)
    func aStreamNeedsAValidTokenOfALiveSession(transport: StreamTestClient.Transport) async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            #expect(try await refusal(harness, token: nil, transport).hasPrefix("401 "))
            #expect(try await refusal(harness, token: "not.a.token", transport).contains("unauthorized"))
            let expired = harness.token(for: session, expiresIn: -120)
            #expect(try await refusal(harness, token: expired, transport).contains("token_expired"))
            // The query parameter works for browsers (EventSource and WebSocket cannot set headers).
            let viaQuery = try await harness.openStream(session, transport, tokenInQuery: true)
            #expect(try await viaQuery.nextMessageAsync(ofType: "hello").string("device_id") == session.deviceID)
            viaQuery.close()
            let signedOut = try await harness.call("POST", "/v1/auth/signout", token: session.accessToken)
            #expect(signedOut.status == 204)
            #expect(try await refusal(harness, token: session.accessToken, transport).contains("session_revoked"))
        }
    }

    @Test func aUserOverTheStreamQuotaIs429UntilAStreamCloses() async throws {
        try await withAccountsGateway(arguments: ["--streams-per-user", "2"]) { harness in
            let session = try await harness.signUpAnonymous()
            let first = try await harness.openStream(session, .webSocket)
            let second = try await harness.openStream(session, .serverSentEvents)
            _ = try await first.nextMessageAsync(ofType: "hello")
            _ = try await second.nextMessageAsync(ofType: "hello")
            let third = try await refusal(harness, token: session.accessToken, .webSocket)
            #expect(third.hasPrefix("429 ") && third.contains("rate_limited"), "\(third)")
            // Another user is not affected.
            let other = try await harness.openStream(try await harness.signUpAnonymous(), .webSocket)
            _ = try await other.nextMessageAsync(ofType: "hello")
            // Once a stream is gone, its place is free again.
            first.close()
            var reopened: StreamTestClient?
            _ = try await eventuallyHolds(seconds: 5) {
                reopened = try? await harness.openStream(session, .webSocket)
                return reopened != nil
            }
            let again = try #require(reopened, "the quota was not given back")
            _ = try await again.nextMessageAsync(ofType: "hello")
        }
    }

    @Test func headOnTheEventsRouteAnswersHeadersWithoutOpeningAStream() async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            let response = try await harness.call("HEAD", "/v1/events", token: session.accessToken)
            #expect(response.status == 200)
            #expect(response.header("Content-Type") == "text/event-stream")
            #expect(try await harness.metric("ferry_streams_open") == 0)
        }
    }

    @Test func aWebSocketHandshakeWithABadVersionIs400() async throws {
        try await withAccountsGateway { harness in
            let session = try await harness.signUpAnonymous()
            let response = try await offload {
                let client = try HTTPTestClient(port: harness.port)
                defer { client.close() }
                return try client.request(
                    "GET", "/v1/stream",
                    headers: [
                        ("Authorization", "Bearer \(session.accessToken)"), ("Upgrade", "websocket"),
                        ("Connection", "Upgrade"), ("Sec-WebSocket-Version", "8"),
                        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                    ])
            }
            #expect(response.status == 400)
            #expect(response.header("Sec-WebSocket-Version") == "13")
        }
    }

    // MARK: - Cues

    @Test(arguments: transports)
    func aSharedTableChangeCuesEveryUser(transport: StreamTestClient.Transport) async throws {
        try await withAccountsGateway { harness in
            try await harness.database.admin.execute(
                """
                create table public.announcements (id text primary key, body text not null);
                select ferry.register_table('public.announcements', strategy => 'shared');
                """)
            var streams: [StreamTestClient] = []
            for _ in 0..<3 {
                let stream = try await harness.openStream(try await harness.signUpAnonymous(), transport)
                _ = try await stream.nextMessageAsync(ofType: "hello")
                streams.append(stream)
            }
            try await harness.database.admin.execute("insert into public.announcements values ('a1', 'hi')")
            for stream in streams {
                let cue = try await stream.nextMessageAsync(ofType: "cue")
                #expect(cue.strings("tables") == ["announcements"], "\(cue)")
                #expect(cue.isNull("origin"), "an operator's SQL has no device: \(cue)")
                stream.close()
            }
        }
    }

    @Test func aCueReachesOnlyItsUsersStreams() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { harness in
            let ana = try await harness.signUpAnonymous()
            let bo = try await harness.signUpAnonymous()
            let anaStream = try await harness.openStream(ana, .webSocket)
            let boStream = try await harness.openStream(bo, .webSocket)
            _ = try await anaStream.nextMessageAsync(ofType: "hello")
            _ = try await boStream.nextMessageAsync(ofType: "hello")
            try await harness.pushTask(ana, id: "t-1")
            #expect(try await anaStream.nextMessageAsync(ofType: "cue").string("origin") == ana.deviceID)
            try await harness.pushTask(bo, id: "t-2")
            // Bo's first message after hello is Bo's own cue, not Ana's.
            let cue = try await boStream.nextMessageAsync(ofType: "cue")
            #expect(cue.string("origin") == bo.deviceID, "\(cue)")
            // Both cues were received once by the listener and written once each, and timed.
            #expect(try await harness.metric("ferry_cues_received_total") == 2)
            #expect(try await harness.metric("ferry_cues_sent_total") == 2)
            #expect(try await harness.metric("ferry_cue_latency_seconds_count") == 2)
            #expect(try await harness.metric("ferry_streams_open", labels: #"transport="websocket""#) == 2)
            anaStream.close()
            boStream.close()
        }
    }

    @Test func aReaderThatStopsReadingGetsOneBoundedCatchUp() async throws {
        // Heartbeats an hour apart: however long the inserts take on a loaded machine,
        // the stalled reader is not closed 4008 meanwhile.
        try await withAccountsGateway(arguments: ["--stream-heartbeat-ms", "3600000"], examples: ["tasks"]) { harness in
            let session = try await harness.signUpAnonymous()
            let stream = try await harness.openStream(session, .webSocket, receiveBufferBytes: 4096, timeout: 20)
            _ = try await stream.nextMessageAsync(ofType: "hello")
            // 10,000 changes, each its own transaction (so each its own notification),
            // while the client reads nothing.
            try await harness.database.admin.execute(
                """
                do $$ begin
                    for i in 1..10000 loop
                        insert into public.tasks (id, user_id, title) values ('bulk-' || i, '\(session.userID)', 'x');
                        commit;
                    end loop;
                end $$;
                """)
            #expect(try await harness.metric("ferry_cues_received_total", becomes: 10_000) == 10_000)
            // Now it reads: a bounded backlog, ending with a cue that covers the last change.
            // First what the server had queued, until a second of silence: the queue
            // drained, which sends the pending cue.
            var (cues, bytes) = try await offload { try stream.readCues(untilSilentFor: 1) }
            // Each notification was merged into a pending cue or began one, and no cue is
            // pending any more: the last change is in a cue sent.
            let (sent, coalesced) = try await eventually("every notification in a cue sent") {
                let sent = try await harness.metric("ferry_cues_sent_total")
                let coalesced = try await harness.metric("ferry_cues_coalesced_total")
                return sent + coalesced == 10_000 ? (sent, coalesced) : nil
            }
            #expect(coalesced > 5_000, "most cues must be merged while the reader is stalled: \(coalesced)")
            if cues < sent {
                // A loaded machine may send the catch-up cue after the second of silence.
                let missing = sent - cues
                let rest = try await offload { try stream.readCues(count: missing) }
                cues += rest.cues
                bytes += rest.bytes
            }
            #expect(cues == sent, "the client read \(cues) of the \(sent) cues sent")
            #expect(cues >= 1, "the backlog ends with a cue")
            #expect(cues < 3_000, "a stalled reader gets a bounded backlog, not 10,000 cues: \(cues)")
            #expect(bytes < 256 * 1024, "\(bytes) bytes")
            let rows = try await harness.database.value(
                "select count(*) from public.tasks where user_id = $1", [session.userID])
            #expect(rows == "10000")
            stream.close()
        }
    }

    /// The listener is killed and kept from reconnecting (the database takes no new
    /// connection of the gateway's role) while a row is inserted, so the insert's
    /// notification is lost for certain; once the listener is back, every stream's first
    /// cue is the catch-up cue, and the pull it calls for brings the row no cue named.
    @Test func afterTheListenerIsKilledEveryStreamIsCuedAndTheGapIsPulled() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { harness in
            let session = try await harness.signUpAnonymous()
            // The writer's streams on both transports, and another user's, who wrote nothing.
            let stranger = try await harness.signUpAnonymous()
            var streams: [StreamTestClient] = []
            for (owner, transport) in [
                (session, StreamTestClient.Transport.webSocket), (session, .serverSentEvents), (stranger, .webSocket),
            ] {
                let stream = try await harness.openStream(owner, transport, timeout: 15)
                _ = try await stream.nextMessageAsync(ofType: "hello")
                streams.append(stream)
            }
            let first = try await harness.call("GET", "/v1/pull", token: session.accessToken)
            let cursor = try #require(first.string("cursor"))
            let database = harness.database.database.name
            // Superusers (the admin) are not held to a database's connection limit.
            try await harness.database.admin.execute("alter database \(database) connection limit 0")
            let killed = try await harness.database.value(
                """
                select count(*) from (
                    select pg_terminate_backend(pid) from pg_stat_activity
                    where datname = current_database() and application_name = 'ferry-listener') killed
                """)
            #expect(killed == "1")
            #expect(try await harness.metric("ferry_listener_connected", becomes: 0) == 0)
            // Made while nobody listens, and nobody can: its notification is lost.
            try await harness.database.admin.execute(
                "insert into public.tasks (id, user_id, title) values ('gap', '\(session.userID)', 'lost cue')")
            #expect(try await harness.metric("ferry_listener_reconnects_total") == 0, "the listener was back too soon")
            try await harness.database.admin.execute("alter database \(database) connection limit -1")
            #expect(try await harness.metric("ferry_listener_reconnects_total", becomes: 1) == 1)
            // Every stream's first cue is the catch-up cue (no tables: anything may have changed).
            for stream in streams {
                let cue = try await stream.nextMessageAsync(ofType: "cue")
                #expect(cue.strings("tables") == [], "not the catch-up cue: \(cue)")
                #expect(cue.isNull("origin"), "\(cue)")
                stream.close()
            }
            #expect(try await harness.metric("ferry_cues_received_total") == 0, "the insert's cue was not lost")
            let pull = try await harness.call(
                "GET", "/v1/pull?cursor=\(cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)",
                token: session.accessToken)
            #expect(pull.status == 200)
            let upserts = (pull.value("changes", "tasks", "upserts") as? [[String: Any]]) ?? []
            #expect(upserts.compactMap { $0["id"] as? String } == ["gap"], "\(pull)")
        }
    }

    /// A gateway that died between a push's commit and sending its cue leaves the cue
    /// queued: another gateway's sweep sends it within a second or so.
    @Test func aCueLeftQueuedByAGatewayThatDiedIsSentByTheSweep() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { harness in
            let session = try await harness.signUpAnonymous()
            let stream = try await harness.openStream(session, .webSocket)
            _ = try await stream.nextMessageAsync(ofType: "hello")
            try await harness.database.admin.query(
                "insert into ferry.queued_cues (payload) values ($1)", ["\(session.userID) other-device tasks"])
            let cue = try await stream.nextMessageAsync(ofType: "cue")
            #expect(cue.strings("tables") == ["tasks"])
            #expect(cue.string("origin") == "other-device")
            #expect(try await harness.database.value("select count(*) from ferry.queued_cues") == "0")
            stream.close()
        }
    }

    @Test func twoGatewaysOnOneDatabaseCueEachOthersStreams() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { harness in
            let session = try await harness.signUpAnonymous()
            try await withStartedGateway(databaseURL: harness.database.gatewayURL) { _, otherPort in
                let other = AccountsGateway(database: harness.database, gateway: harness.gateway, port: otherPort)
                // Its listener connects in the background: a write before it listens cues nobody
                // there, and its first LISTEN is no gap.
                #expect(try await other.metric("ferry_listener_connected", becomes: 1) == 1)
                let stream = try await other.openStream(session, .serverSentEvents)
                _ = try await stream.nextMessageAsync(ofType: "hello")
                try await harness.pushTask(session, id: "t-elsewhere")
                let cue = try await stream.nextMessageAsync(ofType: "cue")
                #expect(cue.strings("tables") == ["tasks"])
                #expect(cue.string("origin") == session.deviceID)
                stream.close()
            }
        }
    }

    @Test func takingALockCuesTheDeviceThatLostIt() async throws {
        try await withAccountsGateway(examples: ["puzzle"]) { harness in
            let email = "locks-\(UUID().uuidString.prefix(8))@example.com"
            let phone = try await harness.emailAccount(email)
            let tabletAnswer = try await harness.signIn(email: email, password: "correct horse battery")
            let tabletToken = try #require(tabletAnswer.string("session", "access_token"), "\(tabletAnswer)")
            let tabletDevice = try #require(decodeClaims(tabletToken)["did"] as? String)
            let tablet = try harness.session(from: tabletAnswer, device: tabletDevice)
            let phoneStream = try await harness.openStream(phone, .webSocket)
            _ = try await phoneStream.nextMessageAsync(ofType: "hello")
            let claim = try await harness.call(
                "POST", "/v1/locks/active_game/current/claim", token: phone.accessToken, json: ["force": false])
            #expect(claim.status == 200, "\(claim)")
            // The phone's own claim comes back first (read, so the takeover's cue is not merged into it).
            #expect(try await phoneStream.nextMessageAsync(ofType: "cue").string("origin") == phone.deviceID)
            let takeover = try await harness.call(
                "POST", "/v1/locks/active_game/current/claim", token: tablet.accessToken, json: ["force": true])
            #expect(takeover.status == 200, "\(takeover)")
            let cue = try await phoneStream.nextMessageAsync(ofType: "cue")
            #expect(cue.strings("tables") == ["active_game"], "\(cue)")
            #expect(cue.string("origin") == tablet.deviceID)
            phoneStream.close()
        }
    }

    // MARK: - Lifecycle

    @Test(arguments: transports)
    func aTokenNearItsEndIsWarnedThenClosed4001(transport: StreamTestClient.Transport) async throws {
        try await withAccountsGateway(arguments: ["--token-leeway", "0"]) { harness in
            let session = try await harness.signUpAnonymous()
            let shortLived = harness.token(for: session, expiresIn: 2)
            let stream = try await harness.openStream(session, transport, token: shortLived)
            _ = try await stream.nextMessageAsync(ofType: "hello")
            let warning = try await stream.nextMessageAsync(ofType: "token_expiring")
            let inMilliseconds = try #require(warning.int("in_ms"))
            #expect(inMilliseconds > 0 && inMilliseconds <= 2_000, "\(warning)")
            let close = try await stream.nextCloseAsync()
            #expect(close.code == 4001 && close.reason == "token_expired", "\(close)")
        }
    }

    @Test func anInBandAuthExtendsAWebSocketAndAnotherUsersTokenIsRefused() async throws {
        try await withAccountsGateway(arguments: ["--token-leeway", "0"]) { harness in
            let session = try await harness.signUpAnonymous()
            // Fifteen seconds leave the opening and the auth message time on a loaded
            // machine (six did not, with the whole suite running at once); the stream must
            // then outlive the first token, so the test waits for its end.
            let firstToken = harness.token(for: session, expiresIn: 15)
            let firstEnd = try #require(decodeClaims(firstToken)["exp"] as? Int)
            let stream = try await harness.openStream(session, .webSocket, token: firstToken, timeout: 15)
            _ = try await stream.nextMessageAsync(ofType: "token_expiring")
            try await offload {
                try stream.sendText(#"{"type":"auth","access_token":"\#(session.accessToken)"}"#)
            }
            let pastFirstEnd = Double(firstEnd + 1) - Date().timeIntervalSince1970
            try await Task.sleep(for: .seconds(max(0, pastFirstEnd)))
            // Past the first token's end the stream is still open: a cue still arrives.
            try await harness.database.admin.execute(
                "select pg_notify('ferry_cue', '\(session.userID) - still_open')")
            #expect(try await stream.nextMessageAsync(ofType: "cue").strings("tables") == ["still_open"])
            let stranger = try await harness.signUpAnonymous()
            try await offload {
                try stream.sendText(#"{"type":"auth","access_token":"\#(stranger.accessToken)"}"#)
            }
            #expect(try await stream.nextCloseAsync().code == 1008)
        }
    }

    @Test(arguments: transports)
    func signingOutCloses4003AndDeletingTheAccountCloses4004(transport: StreamTestClient.Transport) async throws {
        try await withAccountsGateway { harness in
            // Revocations reach streams through the listener: one announced before it
            // listens reaches the token cache when it connects, but closes no stream.
            #expect(try await harness.metric("ferry_listener_connected", becomes: 1) == 1)
            let session = try await harness.signUpAnonymous()
            let stream = try await harness.openStream(session, transport)
            _ = try await stream.nextMessageAsync(ofType: "hello")
            #expect(try await harness.call("POST", "/v1/auth/signout", token: session.accessToken).status == 204)
            let signedOut = try await stream.nextCloseAsync()
            #expect(signedOut.code == 4003 && signedOut.reason == "session_revoked", "\(signedOut)")

            let doomed = try await harness.signUpAnonymous()
            let doomedStream = try await harness.openStream(doomed, transport)
            _ = try await doomedStream.nextMessageAsync(ofType: "hello")
            let deleted = try await harness.call(
                "DELETE", "/v1/account", token: doomed.accessToken, json: ["confirm": "DELETE"])
            #expect(deleted.status == 204)
            let closed = try await doomedStream.nextCloseAsync()
            #expect(closed.code == 4004 && closed.reason == "account_deleted", "\(closed)")
        }
    }

    @Test func aWebSocketThatStopsReadingIsClosedTooSlow() async throws {
        // The client reads the backlog 2 KiB at a time, which on a loaded machine can take
        // longer than the default 2 s wait for its close frame.
        let arguments = ["--stream-heartbeat-ms", "200", "--stream-close-timeout-ms", "120000"]
        try await withAccountsGateway(arguments: arguments) { harness in
            let session = try await harness.signUpAnonymous()
            let stream = try await harness.openStream(session, .webSocket, receiveBufferBytes: 2048, timeout: 10)
            _ = try await stream.nextMessageAsync(ofType: "hello")
            // Fill the socket's buffers with cues the client never reads.
            let filler = String(repeating: "t", count: 200)
            try await harness.database.admin.execute(
                """
                do $$ begin
                    for i in 1..3000 loop
                        perform pg_notify('ferry_cue', '\(session.userID) - \(filler)' || i);
                        commit;
                    end loop;
                end $$;
                """)
            #expect(try await harness.metric("ferry_stream_too_slow_total", becomes: 1) == 1)
            // Reading now, the client gets what was queued, then the close.
            let close = try await stream.nextCloseAsync()
            #expect(close.code == 4008 && close.reason == "too_slow", "\(close)")
            stream.close()
        }
    }

    @Test func anOversizedClientMessageCloses1009AndOtherStreamsCarryOn() async throws {
        try await withAccountsGateway(arguments: ["--stream-max-message-bytes", "1024"]) { harness in
            let session = try await harness.signUpAnonymous()
            let rude = try await harness.openStream(session, .webSocket)
            let polite = try await harness.openStream(session, .webSocket)
            _ = try await rude.nextMessageAsync(ofType: "hello")
            _ = try await polite.nextMessageAsync(ofType: "hello")
            try await offload { try rude.sendText(String(repeating: "x", count: 4096)) }
            #expect(try await rude.nextCloseAsync().code == 1009)
            try await harness.database.admin.execute("select pg_notify('ferry_cue', '\(session.userID) - notes')")
            #expect(try await polite.nextMessageAsync(ofType: "cue").strings("tables") == ["notes"])
            // The rude stream's close handshake ends on its own time.
            #expect(
                try await harness.metric("ferry_streams_open", labels: #"transport="websocket""#, becomes: 1) == 1)
        }
    }

    @Test(arguments: transports)
    func shutdownClosesStreams1001(transport: StreamTestClient.Transport) async throws {
        try await AccountsDatabase.with { database in
            let (stream, gateway) = try await withStartedGateway(databaseURL: database.gatewayURL) {
                gateway, port in
                let harness = AccountsGateway(database: database, gateway: gateway, port: port)
                let stream = try await harness.openStream(try await harness.signUpAnonymous(), transport)
                _ = try await stream.nextMessageAsync(ofType: "hello")
                return (stream, gateway)
            }
            // withStartedGateway shut the gateway down on the way out.
            _ = gateway
            let close = try await stream.nextCloseAsync()
            #expect(close.code == 1001, "\(close)")
        }
    }

    // MARK: - What a closed stream leaves behind

    /// The ways a stream ends, many times over: the client hangs up or (WebSocket) sends a
    /// close frame; the server closes it for a sign-out (4003) or at its token's end
    /// (4001, from the loop's deadline timer). Afterwards the gateway holds no TCP
    /// connection and no stream of any of them.
    @Test(arguments: transports)
    func closedStreamsLeaveNoConnectionOrStreamBehind(transport: StreamTestClient.Transport) async throws {
        try await withAccountsGateway(
            arguments: ["--anonymous-signups-per-hour", "1000", "--token-leeway", "0"]
        ) { harness in
            let live = try await LiveStreamObjects(harness.gateway)
            let cycles = 20
            // Streams whose tokens end in three seconds, closed by the server meanwhile.
            var expiring: [StreamTestClient] = []
            for _ in 0..<cycles {
                let session = try await harness.signUpAnonymous()
                expiring.append(
                    try await harness.openStream(session, transport, token: harness.token(for: session, expiresIn: 3)))
            }
            // What the counts saw while a stream was open (its hello read): the zeros at the
            // end mean something only if they counted it.
            var fewestWhileOpen = (connections: Int.max, streams: Int.max)
            for _ in 0..<cycles {
                let session = try await harness.signUpAnonymous()
                let hangingUp = try await harness.openStream(session, transport)
                _ = try await hangingUp.nextMessageAsync(ofType: "hello")
                let now = live.now
                fewestWhileOpen = (
                    min(fewestWhileOpen.connections, now.connections), min(fewestWhileOpen.streams, now.streams)
                )
                hangingUp.close()

                let signingOut = try await harness.openStream(session, transport)
                _ = try await signingOut.nextMessageAsync(ofType: "hello")
                #expect(try await harness.call("POST", "/v1/auth/signout", token: session.accessToken).status == 204)
                #expect(try await signingOut.nextCloseAsync().code == 4003)
                signingOut.close()

                guard transport == .webSocket else { continue }
                let closing = try await harness.openStream(try await harness.signUpAnonymous(), transport)
                _ = try await closing.nextMessageAsync(ofType: "hello")
                let (answer, ended) = try await offload {
                    try closing.sendFrame(opcode: 0x8, [0x03, 0xE8])
                    return (try closing.nextClose().code, closing.socket.waitForClose())
                }
                #expect(answer == 1000 && ended)
                closing.close()
            }
            for stream in expiring {
                #expect(try await stream.nextCloseAsync().code == 4001)
                stream.close()
            }
            #expect(fewestWhileOpen.connections >= 1 && fewestWhileOpen.streams >= 1, "\(fewestWhileOpen) while open")
            #expect(try await harness.metric("ferry_streams_open", becomes: 0) == 0)
            let left = try await live.settled()
            #expect(left.connections == 0 && left.streams == 0, "\(left) left behind")
        }
    }

    /// Shutdown closes every stream 1001, and then nothing of them is left.
    @Test(arguments: transports)
    func streamsClosedByShutdownLeaveNothingBehind(transport: StreamTestClient.Transport) async throws {
        try await AccountsDatabase.with { database in
            let count = 10
            let (gateway, live, streams, whileOpen) = try await withStartedGateway(databaseURL: database.gatewayURL) {
                gateway, port in
                let harness = AccountsGateway(database: database, gateway: gateway, port: port)
                var streams: [StreamTestClient] = []
                for _ in 0..<count {
                    let stream = try await harness.openStream(try await harness.signUpAnonymous(), transport)
                    _ = try await stream.nextMessageAsync(ofType: "hello")
                    streams.append(stream)
                }
                let live = try await LiveStreamObjects(gateway)
                return (gateway, live, streams, live.now)
            }
            // The counts saw the streams while they were open: the zeros below mean something.
            #expect(whileOpen.connections >= count && whileOpen.streams == count, "\(whileOpen) while open")
            for stream in streams {
                #expect(try await stream.nextCloseAsync().code == 1001)
                stream.close()
            }
            let left = try await live.settled()
            #expect(left.connections == 0 && left.streams == 0, "\(left) left behind")
            // The stopped gateway itself stays until here: what it still holds must be nothing.
            withExtendedLifetime(gateway) {}
        }
    }
}

/// The gateway's live ``TCPConnection`` and ``StreamSubscriber`` objects, over every loop.
/// Each stream object holds its connection, and each subscriber its stream, so a stream
/// that outlives its close keeps both counts up. Readable after the gateway stopped.
private struct LiveStreamObjects: Sendable {
    let counts: [(connections: LiveInstanceCount, streams: LiveInstanceCount)]

    init(_ gateway: Gateway) async throws {
        let contexts = gateway.contexts
        counts = try await offload {
            contexts.map { context in
                (context.loop.liveTCPConnections, context.loop.runAndWait { context.value.hub.liveSubscribers })
            }
        }
    }

    var now: (connections: Int, streams: Int) {
        (counts.map(\.connections.value).reduce(0, +), counts.map(\.streams.value).reduce(0, +))
    }

    /// The counts once they reach zero, or as they are after ten seconds: the last
    /// closes reach the server after the client has seen them.
    func settled() async throws -> (connections: Int, streams: Int) {
        _ = try await eventuallyHolds(seconds: 10) { now == (0, 0) }
        return now
    }
}

/// The answer to opening a stream that must be refused: "status body".
private func refusal(
    _ harness: AccountsGateway, token: String?, _ transport: StreamTestClient.Transport
) async throws -> String {
    let port = harness.port
    return try await offload { () -> String in
        do {
            let client = try StreamTestClient(port: port, transport: transport, token: token)
            client.close()
            return "opened"
        } catch let error as HTTPTestClientError {
            return error.description
        }
    }
}

extension StreamTestClient {
    /// Reads cues until `silence` seconds pass without one (the first may take the
    /// stream's own timeout); returns how many came and their JSON's bytes. Anything but
    /// a cue, and any error but that silence, fails.
    func readCues(untilSilentFor silence: Double) throws -> (cues: Int, bytes: Int) {
        var cues = 0
        var bytes = 0
        defer { socket.setTimeout(timeout) }
        for _ in 0..<10_000 {
            let event: Event
            do {
                event = try next()
            } catch let error as HTTPTestClientError where error == .receiveTimedOut && cues > 0 {
                break
            }
            guard case .message(let message) = event, message.type == "cue" else {
                throw HTTPTestClientError(description: "not a cue: \(event)")
            }
            cues += 1
            bytes += message.json.utf8.count
            socket.setTimeout(silence)
        }
        return (cues, bytes)
    }

    /// Reads `count` cues; returns them counted and their JSON's bytes. Anything but a cue fails.
    func readCues(count: Int) throws -> (cues: Int, bytes: Int) {
        var bytes = 0
        for _ in 0..<count {
            let event = try next()
            guard case .message(let message) = event, message.type == "cue" else {
                throw HTTPTestClientError(description: "not a cue: \(event)")
            }
            bytes += message.json.utf8.count
        }
        return (count, bytes)
    }
}
