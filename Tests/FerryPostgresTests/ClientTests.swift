import FerryPostgres
import FerryTestSupport
import Testing

@Suite(.hangLimit, .tags(.database), .tagSelection) struct ClientTests {
    @Test func queryReturnsRowsWithParameters() async throws {
        try await TestDatabase.with { database in
            let client = try await database.connect()
            let result = try await client.query(
                "select $1::int + 1 as n, null::text as missing, 'héllo' as word", ["41"])
            #expect(result.columns == ["n", "missing", "word"])
            #expect(result.count == 1)
            #expect(result[0, "n"] == "42")
            #expect(result[0, 1] == nil)
            #expect(result[0, "word"] == "héllo")
            #expect(result.bytes(0, 2) == Array("héllo".utf8))
            #expect(result.commandTag == "SELECT 1")
            await client.close()
        }
    }

    @Test func executeRunsSeveralStatements() async throws {
        try await TestDatabase.with { database in
            let client = try await database.connect()
            let results = try await client.execute(
                "create table t (id int primary key, name text); insert into t values (1, 'a'), (2, 'b');")
            #expect(results.count == 2)
            #expect(results[1].affectedRows == 2)
            let rows = try await client.query("select id, name from t order by id")
            #expect(rows.rows.map(\.values) == [["1", "a"], ["2", "b"]])
            await client.close()
        }
    }

    @Test func serverErrorCarriesSQLState() async throws {
        try await TestDatabase.with { database in
            let client = try await database.connect()
            await #expect {
                try await client.query("select * from missing_table")
            } throws: { error in
                let error = error as? PostgresError
                return error?.kind == .server && error?.sqlState == "42P01" && error?.isRetryable == false
            }
            // The connection is still usable after an error.
            #expect(try await client.query("select 1")[0, 0] == "1")
            await client.close()
        }
    }

    /// libpq takes text parameters as C strings: sent, this one would arrive as `a`.
    @Test func aParameterWithANULFailsBeforeItIsSent() async throws {
        try await TestDatabase.with { database in
            let client = try await database.connect()
            await #expect {
                try await client.query("select $1::text", ["a\u{0}b"])
            } throws: { error in
                let error = error as? PostgresError
                return error?.kind == .unsendableText && error?.isRetryable == false
                    && error?.message.contains("parameter $1 holds a NUL byte") == true
            }
            #expect(try await client.query("select $1::text", ["ab"])[0, 0] == "ab")
            await client.close()
        }
    }
}
