import FerryLoop
import FerryPostgres
import FerryTestSupport
import Foundation
import Synchronization
import Testing

/// Connects on `loop` from a test task.
func connect(on loop: EventLoop, _ configuration: PostgresConfiguration) async throws -> LoopBound<PostgresConnection> {
    try await onLoop(loop) { done in
        PostgresConnection.connect(on: loop, configuration: configuration) {
            done($0.map { LoopBound($0, loop: loop) })
        }
    }.get()
}

@Suite(.hangLimit, .tags(.database), .tagSelection) struct ConnectionTests {
    @Test func pipelineStatementsShareOneImplicitTransaction() async throws {
        try await TestDatabase.with { database in
            let client = try await database.connect()
            let results = try await client.pipeline([
                PostgresStatement("select set_config('ferry.user_id', $1, true)", ["user-1"]),
                PostgresStatement("select current_setting('ferry.user_id') as uid, txid_current() as xid"),
                PostgresStatement("select txid_current() as xid"),
            ])
            #expect(results.count == 3)
            #expect(results[1][0, "uid"] == "user-1")
            #expect(results[1][0, "xid"] == results[2][0, "xid"])
            // Transaction-local: gone once the pipeline's transaction ended.
            let after = try await client.query("select coalesce(current_setting('ferry.user_id', true), '') as uid")
            #expect(after[0, "uid"] == "")
            await client.close()
        }
    }

    @Test func errorMidPipelineAbortsTheRestAndRollsBack() async throws {
        try await TestDatabase.with { database in
            let client = try await database.connect()
            try await client.execute("create table t (id int primary key)")
            await #expect {
                try await client.pipeline([
                    PostgresStatement("insert into t values (1)"),
                    PostgresStatement("select 1 / $1::int", ["0"]),
                    PostgresStatement("insert into t values (2)"),
                ])
            } throws: { ($0 as? PostgresError)?.sqlState == "22012" }
            #expect(try await client.query("select count(*) from t")[0, 0] == "0")
            // The connection left the aborted pipeline behind.
            #expect(try await client.pipeline(["insert into t values (3)", "select count(*) from t"])[1][0, 0] == "1")
            await client.close()
        }
    }

    @Test func preparedStatementIsPreparedOncePerConnection() async throws {
        try await TestDatabase.with { database in
            let client = try await database.connect()
            for value in 1...3 {
                let result = try await client.query(
                    PostgresStatement("select $1::int * 2 as doubled", [String(value)], preparedName: "double"))
                #expect(result[0, "doubled"] == String(value * 2))
            }
            let prepared = try await client.query(
                "select count(*), max(statement) from pg_prepared_statements where name = 'double'")
            #expect(prepared[0, 0] == "1")
            #expect(prepared[0, 1]?.contains("$1::int * 2") == true)
            await client.close()
        }
    }

    @Test func operationsQueuedOnOneConnectionCompleteInOrder() async throws {
        try await TestDatabase.with { database in
            try await withLoop { loop in
                let connection = try await connect(on: loop, database.configuration)
                let order: [Int] = try await onLoop(loop) { done in
                    var order: [Int] = []
                    for index in 0..<50 {
                        let completion: (Result<PostgresResult, PostgresError>) -> Void = { result in
                            order.append((try? result.get()).flatMap { $0[0, 0] }.flatMap { Int($0) } ?? -1)
                            if order.count == 50 { done(order) }
                        }
                        if index % 10 == 9 {
                            connection.value.execute("select \(index)") { completion($0.map { $0[0] }) }
                        } else {
                            connection.value.query("select $1::int", [String(index)], completion)
                        }
                    }
                    #expect(connection.value.pendingOperations == 50)
                }
                #expect(order == Array(0..<50))
                try await onLoop(loop) { done in
                    connection.value.close()
                    done(())
                }
            }
        }
    }

    @Test func notificationFromAnotherConnectionArrives() async throws {
        try await TestDatabase.with { database in
            try await withLoop { loop in
                let listener = try await connect(on: loop, database.configuration)
                let received = Mutex<[PostgresNotification]>([])
                let _: Void = try await onLoop(loop) { done in
                    listener.value.onNotification = { note in received.withLock { $0.append(note) } }
                    listener.value.execute("LISTEN ferry_cue") { _ in done(()) }
                }
                let sender = try await database.connect()
                let senderPID = await sender.backendPID()
                try await sender.query("select pg_notify('ferry_cue', $1)", ["user-1:tasks"])
                try await waitUntil(loop, "notification") { !received.withLock { $0.isEmpty } }
                #expect(
                    received.withLock { $0 }
                        == [PostgresNotification(channel: "ferry_cue", payload: "user-1:tasks", senderPID: senderPID)])
                await sender.close()
                try await onLoop(loop) { done in
                    listener.value.close()
                    done(())
                }
            }
        }
    }

    @Test func terminatedConnectionFailsRetryablyAndNeverHangs() async throws {
        try await TestDatabase.with { database in
            try await withLoop { loop in
                let connection = try await connect(on: loop, database.configuration)
                let pid: Int32 = try await onLoop(loop) { done in done(connection.value.backendPID) }
                let admin = try await PostgresClient.connect(database.maintenance)
                let inFlight = Task {
                    try await onLoop(loop) { done in
                        connection.value.query("select pg_sleep(30)") { done($0) }
                    }
                }
                // Terminated while the query runs, not before it was sent.
                try await admin.waitForBackend(pid, running: "pg_sleep(30)")
                #expect(try await admin.query("select pg_terminate_backend($1)", [String(pid)])[0, 0] == "t")
                let first = try await inFlight.value
                guard case .failure(let error) = first else {
                    Issue.record("the query on a terminated backend must fail")
                    return
                }
                #expect(error.isRetryable)
                // Later operations fail at once, retryably.
                let later = try await onLoop(loop) { done in connection.value.query("select 1") { done($0) } }
                guard case .failure(let laterError) = later else {
                    Issue.record("a broken connection must fail later operations")
                    return
                }
                #expect(laterError.isRetryable)
                #expect(try await onLoop(loop) { done in done(connection.value.isUsable) } == false)
                await admin.close()
            }
        }
    }

    @Test func statementTimeoutFailsTheStatementAndKeepsTheConnection() async throws {
        try await TestDatabase.with { database in
            let client = try await PostgresClient.connect(database.configuration)
            // Set per transaction, as the gateway does, and in force for the statement
            // after it in the same pipeline. 57014 is the server cancelling the statement,
            // not the sleep running out.
            await #expect {
                try await client.pipeline([
                    PostgresStatement("select set_config('statement_timeout', $1, true)", ["200"]),
                    "select pg_sleep(5)",
                ])
            } throws: { ($0 as? PostgresError)?.sqlState == "57014" }
            #expect(try await client.query("select 1")[0, 0] == "1")
            await client.close()
        }
    }

    /// A pooler in transaction mode hands a server connection to other clients between
    /// transactions: with preparing off, nothing named is left on it.
    @Test func withoutPreparingNoStatementIsLeftOnTheServer() async throws {
        try await TestDatabase.with { database in
            var configuration = database.configuration
            configuration.preparesStatements = false
            let client = try await PostgresClient.connect(configuration)
            let named = PostgresStatement("select $1::int + 1", ["41"], preparedName: "ferry_answer")
            for _ in 0..<2 { #expect(try await client.query(named)[0, 0] == "42") }
            #expect(try await client.query("select count(*) from pg_prepared_statements")[0, 0] == "0")
            await client.close()
            let preparing = try await PostgresClient.connect(database.configuration)
            for _ in 0..<2 { #expect(try await preparing.query(named)[0, 0] == "42") }
            #expect(try await preparing.query("select name from pg_prepared_statements")[0, 0] == "ferry_answer")
            await preparing.close()
        }
    }

    @Test func clientDeadlineFailsAStuckOperation() async throws {
        try await TestDatabase.with { database in
            var configuration = database.configuration
            configuration.operationTimeoutMilliseconds = 300
            let client = try await PostgresClient.connect(configuration)
            await #expect {
                try await client.query("select pg_sleep(5)")
            } throws: { error in
                let error = error as? PostgresError
                return error?.kind == .timeout && error?.isRetryable == true
            }
            await #expect {
                try await client.query("select 1")
            } throws: { ($0 as? PostgresError)?.kind == .connectionLost }
            await client.close()
        }
    }

    @Test func connectsThroughTheNextHostWhenTheFirstRefuses() async throws {
        // libpq opens a new socket for the second host: the connection must watch the new one.
        let database = try await TestDatabase.create()
        let server = database.configuration.parameters
        let host = server["host"] ?? "127.0.0.1"
        let port = server["port"] ?? "5432"
        let user = server["user"] ?? "postgres"
        let configuration = try PostgresConfiguration(
            "host=\(host),\(host) port=1,\(port) user=\(user) dbname=\(database.name)")
        let client = try await PostgresClient.connect(configuration)
        #expect(try await client.query("select current_database()")[0, 0] == database.name)
        await client.close()
        try await database.drop()
    }

    /// A server that accepts and never answers: the timeout says where the connect stalled.
    @Test func aConnectTimeoutSaysWhereItStalled() async throws {
        let silent = try LoopbackSocket(listening: true)
        // The kernel completes the handshake from the backlog; nobody ever reads or writes.
        let configuration = try PostgresConfiguration(
            "postgresql://postgres@127.0.0.1:\(silent.port)/postgres",
            connectTimeoutMilliseconds: 500)
        await #expect {
            try await PostgresClient.connect(configuration)
        } throws: { error in
            let message = (error as? PostgresError)?.message ?? ""
            return message.hasPrefix("connect timed out after 500 ms (waiting for ")
                && !message.contains("; 0 socket events")
        }
        withExtendedLifetime(silent) {}
    }

    @Test func unreachableServerFailsToConnectRetryably() async throws {
        let configuration = try PostgresConfiguration(
            "postgresql://postgres@127.0.0.1:1/postgres", connectTimeoutMilliseconds: 2_000)
        await #expect {
            try await PostgresClient.connect(configuration)
        } throws: { error in
            let error = error as? PostgresError
            return error?.kind == .connectionFailed && error?.isRetryable == true
        }
    }
}
