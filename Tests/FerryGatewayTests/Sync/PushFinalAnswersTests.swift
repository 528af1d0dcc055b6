import FerryTestSupport
import Foundation
import Testing

/// PROTOCOL.md's notes, "Push, pull and schema" and "Database errors": data a push
/// carries that PostgreSQL cannot store or that does not fit gets a final answer, never
/// a 5xx the client would retry forever. A mutation that holds the problem is rejected
/// on its own and the rest of the batch applies; a body that is not UTF-8 JSON, or nests
/// deeper than the limit, is `400 invalid_json` on every JSON route. Over real HTTP, as
/// `ferry_gateway`.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct PushFinalAnswersTests {
    static let tables = """
        create table public.items (
            user_id uuid not null, id text not null, title text, seconds integer, meta jsonb,
            primary key (user_id, id));
        select ferry.register_table('items', 'lww');
        create table public.games (user_id uuid not null, slot text not null, primary key (user_id, slot));
        select ferry.register_table('games', 'device_lock');
        """

    func withItems(_ body: (AccountsGateway, TestSession) async throws -> Void) async throws {
        try await withAccountsGateway { server in
            try await server.database.admin.execute(Self.tables)
            try await body(server, try await server.signUpAnonymous())
        }
    }

    /// `POST /v1/push` with `text` as the body, byte for byte.
    func push(_ server: AccountsGateway, _ session: TestSession, _ text: String) async throws -> PushResponse {
        PushResponse(
            response: try await server.call("POST", "/v1/push", token: session.accessToken, body: Array(text.utf8)))
    }

    func rows(_ server: AccountsGateway) async throws -> [[String?]] {
        try await server.database.rows("select id, title, meta::text from public.items order by id")
    }

    // MARK: - What PostgreSQL cannot store

    @Test func mutationsHoldingANulEscapeAreRejectedAloneAndTheRestApplies() async throws {
        try await withItems { server, device in
            // \u0000 in a text value, in a jsonb key, in the table name, in a column name;
            // an escaped backslash before "u0000" is an ordinary string.
            let batch = #"""
                {"mutations": [
                  {"id": 1, "table": "items", "op": "upsert", "row": {"id": "a", "title": "first"}},
                  {"id": 2, "table": "items", "op": "upsert", "row": {"id": "b", "title": "nul\u0000here"}},
                  {"id": 3, "table": "items", "op": "upsert", "row": {"id": "c", "meta": {"k\u0000": 1}}},
                  {"id": 4, "table": "it\u0000ems", "op": "upsert", "row": {"id": "d"}},
                  {"id": 5, "table": "items", "op": "upsert", "row": {"id": "e", "ti\u0000tle": "x"}},
                  {"id": 6, "table": "items", "op": "upsert", "row": {"id": "f", "title": "back\\u0000slash"}}
                ], "ignored\u0000": true}
                """#
            let first = try await push(server, device, batch)
            #expect(first.response.status == 200, "\(first.response)")
            #expect(
                first.outcomes == [
                    "applied", "rejected:invalid_row", "rejected:invalid_row", "rejected:invalid_row",
                    "rejected:invalid_row", "applied",
                ], "\(first.response)")
            #expect(first.lastMutationID == 6)
            let messages = (first.response.value("results") as? [[String: Any]] ?? []).map { $0["message"] as? String }
            try #require(messages.count == 6)
            #expect(messages[1]?.contains(#"column "title" holds \u0000"#) == true, "\(messages)")
            #expect(messages[2]?.contains(#"column "meta" holds \u0000"#) == true, "\(messages)")
            #expect(messages[3]?.contains("table name holds \\u0000") == true, "\(messages)")
            #expect(try await rows(server) == [["a", "first", nil], ["f", #"back\u0000slash"#, nil]])

            // The same batch again is duplicate throughout: nothing is stuck behind it.
            let replay = try await push(server, device, batch)
            #expect(replay.outcomes == Array(repeating: "duplicate", count: 6), "\(replay.response)")
        }
    }

    @Test func aNumberBeyondNumericsRangeIsRejectedAloneNamingItsColumn() async throws {
        try await withItems { server, device in
            let batch = #"""
                {"mutations": [
                  {"id": 1, "table": "items", "op": "upsert", "row": {"id": "a", "meta": {"n": 1e999999}}},
                  {"id": 2, "table": "items", "op": "upsert", "row": {"id": "b", "meta": {"n": 1e300}}}
                ]}
                """#
            let answer = try await push(server, device, batch)
            #expect(answer.outcomes == ["rejected:invalid_row", "applied"], "\(answer.response)")
            let message = (answer.response.value("results") as? [[String: Any]])?.first?["message"] as? String
            #expect(message?.hasPrefix(#"column "meta": "#) == true, "\(answer.response)")
            #expect(try await server.database.value("select count(*) from public.items") == "1")
        }
    }

    @Test func aValueTooLargeForItsIndexIsRejectedAlone() async throws {
        try await withItems { server, device in
            // 3,000 random bytes as hex: a key no btree entry can hold, and no compression shrinks.
            let big = (0..<3000).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
            let answer = try await server.pushBatch(
                device,
                [
                    ["id": 1, "table": "items", "op": "upsert", "row": ["id": big]],
                    ["id": 2, "table": "items", "op": "upsert", "row": ["id": "small"]],
                ])
            #expect(answer.outcomes == ["rejected:invalid_row", "applied"], "\(answer.response)")
            #expect(try await server.database.value("select string_agg(id, ',') from public.items") == "small")
        }
    }

    @Test func anOperatorTriggersRaiseExceptionRejectsTheMutationAlone() async throws {
        try await withItems { server, device in
            try await server.database.admin.execute(
                """
                create function public.no_shouting() returns trigger language plpgsql as $$
                begin
                    if new.title = upper(new.title) then raise exception 'titles may not shout'; end if;
                    return new;
                end $$;
                create trigger no_shouting before insert or update on public.items
                    for each row execute function public.no_shouting();
                """)
            let answer = try await server.pushBatch(
                device,
                [
                    ["id": 1, "table": "items", "op": "upsert", "row": ["id": "a", "title": "LOUD"]],
                    ["id": 2, "table": "items", "op": "upsert", "row": ["id": "b", "title": "quiet"]],
                ])
            #expect(answer.outcomes == ["rejected:invalid_row", "applied"], "\(answer.response)")
            let message = (answer.response.value("results") as? [[String: Any]])?.first?["message"] as? String
            #expect(message == "titles may not shout", "\(answer.response)")
        }
    }

    // MARK: - Bodies that are not UTF-8 JSON

    @Test func aBodyNestedDeeperThanTheLimitIsInvalidJSONAndOneAtTheLimitApplies() async throws {
        try await withItems { server, device in
            func batch(id: Int, depth: Int) -> String {
                // The body, mutations, the mutation and row are four levels; meta holds the rest.
                let meta = String(repeating: "[", count: depth - 4) + String(repeating: "]", count: depth - 4)
                return
                    #"{"mutations": [{"id": \#(id), "table": "items", "op": "upsert", "row": {"id": "deep\#(id)", "meta": \#(meta)}}]}"#
            }
            for depth in [100_000, 129] {
                let refused = try await push(server, device, batch(id: 1, depth: depth))
                #expect(
                    refused.response.status == 400 && refused.response.code == "invalid_json", "\(refused.response)")
                #expect(refused.response.retryable == false)
            }
            #expect(
                try await server.database.value("select count(*) from ferry.devices where last_mutation_id > 0") == "0")
            let atTheLimit = try await push(server, device, batch(id: 2, depth: 128))
            #expect(atTheLimit.outcomes == ["applied"], "\(atTheLimit.response)")
        }
    }

    @Test func invalidUTF8IsInvalidJSONOnEveryJSONBodyRoute() async throws {
        try await withItems { server, device in
            // A cut-short sequence in a value, an encoded surrogate in a field nobody reads.
            let cut: [UInt8] =
                Array(
                    #"{"mutations": [{"id": 1, "table": "items", "op": "upsert", "row": {"id": "a", "title": "caf"#.utf8
                )
                + [0xC3] + Array(#""}}]}"#.utf8)
            let pushed = try await server.call("POST", "/v1/push", token: device.accessToken, body: cut)
            #expect(pushed.status == 400 && pushed.code == "invalid_json", "\(pushed)")
            #expect(try await server.database.value("select count(*) from public.items") == "0")

            func body(_ json: String) -> [UInt8] {
                Array(json.dropLast().utf8) + Array(#", "x": ""#.utf8) + [0xED, 0xA0, 0x80] + Array(#""}"#.utf8)
            }
            let requests: [(String, String, String?, String)] = [
                ("POST", "/v1/auth/anonymous", nil, #"{"device_id": "\#(UUID().uuidString)"}"#),
                ("POST", "/v1/auth/refresh", nil, #"{"refresh_token": "\#(device.refreshToken)"}"#),
                (
                    "POST", "/v1/auth/link", device.accessToken,
                    #"{"email": "u@example.com", "password": "long enough"}"#
                ),
                (
                    "POST", "/v1/auth/signin", nil,
                    #"{"email": "u@example.com", "password": "long enough", "device_id": "\#(UUID().uuidString)"}"#
                ),
                ("POST", "/v1/locks/games/current/claim", device.accessToken, #"{"force": false}"#),
                ("DELETE", "/v1/account", device.accessToken, #"{"confirm": "DELETE"}"#),
            ]
            for (method, path, token, json) in requests {
                let response = try await server.call(method, path, token: token, body: body(json))
                #expect(response.status == 400 && response.code == "invalid_json", "\(path): \(response)")
            }
            #expect(try await server.database.value("select count(*) from ferry.users") == "1")
            #expect(try await server.database.value("select count(*) from public.games") == "0")
            #expect(try await server.refresh(device.refreshToken).status == 200, "the refresh token was not used")
        }
    }

    // MARK: - Rejections that say what is wrong

    @Test func aValueThatDoesNotConvertNamesItsColumn() async throws {
        try await withItems { server, device in
            let answer = try await server.pushBatch(
                device, [["id": 1, "table": "items", "op": "upsert", "row": ["id": "a", "seconds": "abc"]]])
            #expect(answer.outcomes == ["rejected:invalid_row"], "\(answer.response)")
            let message = (answer.response.value("results") as? [[String: Any]])?.first?["message"] as? String
            #expect(message == #"column "seconds": invalid input syntax for type integer: "abc""#, "\(answer.response)")
        }
    }

    @Test func aMutationWithoutATableSaysTheFieldIsMissing() async throws {
        try await withItems { server, device in
            let answer = try await server.pushBatch(
                device,
                [
                    ["id": 1, "op": "upsert", "row": ["id": "a"]],
                    ["id": 2, "table": 7, "op": "upsert", "row": ["id": "a"]],
                ])
            #expect(answer.outcomes == ["rejected:unknown_table", "rejected:unknown_table"], "\(answer.response)")
            let messages = (answer.response.value("results") as? [[String: Any]] ?? []).map { $0["message"] as? String }
            #expect(messages == ["the mutation has no table field", "table must be a string, not 7"], "\(messages)")
        }
    }

    @Test func aKeyOfAnotherJSONTypeThanPullSendsIsRejected() async throws {
        try await withItems { server, device in
            let answer = try await server.pushBatch(
                device,
                [
                    ["id": 1, "table": "items", "op": "upsert", "row": ["id": 5, "title": "number"]],
                    ["id": 2, "table": "items", "op": "delete", "key": ["id": 5]],
                    ["id": 3, "table": "items", "op": "upsert", "row": ["id": "5", "title": "string"]],
                ])
            #expect(
                answer.outcomes == ["rejected:invalid_row", "rejected:invalid_row", "applied"], "\(answer.response)")
            let message = (answer.response.value("results") as? [[String: Any]])?.first?["message"] as? String
            #expect(message == #"key column "id" takes a JSON string (as pull sends it), not a number"#)
            #expect(try await rows(server) == [["5", "string", nil]])
        }
    }

    @Test func aMutationWithoutAnIDRefusesTheBatch() async throws {
        try await withItems { server, device in
            let answer = try await server.pushBatch(device, [["table": "items", "op": "upsert", "row": ["id": "a"]]])
            #expect(answer.response.status == 400 && answer.response.code == "invalid_request", "\(answer.response)")
            #expect(try await server.database.value("select count(*) from public.items") == "0")
        }
    }
}
