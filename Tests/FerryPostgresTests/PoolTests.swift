import FerryLoop
import FerryPostgres
import FerryTestSupport
import Synchronization
import Testing

/// Creates a pool on `loop` from a test task.
///
/// A waiter waits as long as a test connection may take to open (TestDatabase's 30 s
/// connect timeout): under a full parallel run a new connection has taken over 5 s, and
/// a waiter that gives up first fails a test about something else.
func makePool(
    on loop: EventLoop, _ configuration: PostgresConfiguration, maxConnections: Int, maxWaiters: Int = 1_000,
    waitTimeoutMilliseconds: UInt64 = 30_000
) async throws -> LoopBound<PostgresPool> {
    try await onLoop(loop) { done in
        done(
            LoopBound(
                PostgresPool(
                    loop: loop, configuration: configuration, maxConnections: maxConnections, maxWaiters: maxWaiters,
                    waitTimeoutMilliseconds: waitTimeoutMilliseconds), loop: loop))
    }
}

@Suite(.hangLimit, .tags(.database), .tagSelection) struct PoolTests {
    @Test func manyConcurrentCallersShareFewConnections() async throws {
        try await TestDatabase.with { database in
            try await withLoop { loop in
                var configuration = database.configuration
                configuration.applicationName = "pool-\(database.name)"
                let pool = try await makePool(on: loop, configuration, maxConnections: 4)
                let callers = 200
                let (values, mostOpen): ([Int], Int) = try await onLoop(loop) { done in
                    var values: [Int] = []
                    var mostOpen = 0
                    for caller in 0..<callers {
                        let statement = PostgresStatement(
                            "select $1::int as n, pg_sleep(0.002)", [String(caller)], preparedName: "pick")
                        pool.value.query(statement) { result in
                            mostOpen = max(mostOpen, pool.value.statistics.open)
                            values.append((try? result.get()).flatMap { $0[0, "n"] }.flatMap { Int($0) } ?? -1)
                            if values.count == callers { done((values, mostOpen)) }
                        }
                        mostOpen = max(mostOpen, pool.value.statistics.open)
                    }
                }
                #expect(values.sorted() == Array(0..<callers))
                #expect(mostOpen <= 4)
                // Connections opened for the rush may still be connecting when the last
                // answer arrives (a loaded machine served all 200 on two): they become idle.
                try await waitUntil(loop, "every opened connection idle") { pool.value.statistics.idle == 4 }
                let statistics = try await onLoop(loop) { done in done(pool.value.statistics) }
                #expect(statistics == .init(open: 4, inUse: 0, idle: 4, waiting: 0))
                let admin = try await database.connect()
                let serverSide = try await admin.query(
                    "select count(*) from pg_stat_activity where application_name = $1", [configuration.applicationName]
                )
                #expect(serverSide[0, 0] == "4")
                await admin.close()
                try await onLoop(loop) { done in
                    pool.value.close()
                    done(())
                }
            }
        }
    }

    @Test func aConnectionThatCarriedALargeMessageIsClosedOnReleaseAndSmallOnesAreKept() async throws {
        try await TestDatabase.with { database in
            try await withLoop { loop in
                let pool = try await makePool(on: loop, database.configuration, maxConnections: 1)
                func backend(_ sql: String, _ parameters: [String?] = []) async throws -> String? {
                    try await onLoop(loop) { done in pool.value.query(sql, parameters) { done($0) } }.get()[0, "pid"]
                }
                let first = try await backend("select pg_backend_pid() as pid")
                #expect(try await backend("select pg_backend_pid() as pid") == first, "a small query kept it")
                // A parameter past the bound: libpq's output buffer grew to hold it.
                let big = String(repeating: "x", count: PostgresConnection.largeBufferBytes + 1)
                #expect(try await backend("select pg_backend_pid() as pid, length($1)", [big]) == first)
                let second = try await backend("select pg_backend_pid() as pid")
                #expect(second != first, "the connection that sent a large parameter was kept")
                // A result past the bound: its input buffer grew to hold it.
                #expect(
                    try await backend(
                        "select pg_backend_pid() as pid, repeat('y', \(PostgresConnection.largeBufferBytes + 1))")
                        == second)
                #expect(try await backend("select pg_backend_pid() as pid") != second)
                try await onLoop(loop) { done in
                    pool.value.close()
                    done(())
                }
            }
        }
    }

    @Test func brokenConnectionIsReplacedAndTheNextQuerySucceeds() async throws {
        try await TestDatabase.with { database in
            try await withLoop { loop in
                let pool = try await makePool(on: loop, database.configuration, maxConnections: 1)
                let firstPID = try await onLoop(loop) { done in
                    pool.value.query("select pg_backend_pid()") { done($0) }
                }.get()[0, 0]!
                let admin = try await PostgresClient.connect(database.maintenance)
                let sleeping = Task {
                    try await onLoop(loop) { done in pool.value.query("select pg_sleep(30)") { done($0) } }
                }
                // Terminated while the query runs, not before it was sent.
                try await admin.waitForBackend(try #require(Int32(firstPID)), running: "pg_sleep(30)")
                #expect(try await admin.query("select pg_terminate_backend($1::int)", [firstPID])[0, 0] == "t")
                guard case .failure(let error) = try await sleeping.value else {
                    Issue.record("the query on the terminated backend must fail")
                    return
                }
                #expect(error.isRetryable)
                let next = try await onLoop(loop) { done in
                    pool.value.query("select pg_backend_pid()") { done($0) }
                }
                let secondPID = try next.get()[0, 0]
                #expect(secondPID != nil && secondPID != firstPID)
                #expect(try await onLoop(loop) { done in done(pool.value.statistics.open) } == 1)
                await admin.close()
                try await onLoop(loop) { done in
                    pool.value.close()
                    done(())
                }
            }
        }
    }

    @Test func idleConnectionEndedByTheServerIsDiscarded() async throws {
        try await TestDatabase.with { database in
            try await withLoop { loop in
                let pool = try await makePool(on: loop, database.configuration, maxConnections: 1)
                let pid = try await onLoop(loop) { done in
                    pool.value.query("select pg_backend_pid()") { done($0) }
                }.get()[0, 0]!
                let admin = try await PostgresClient.connect(database.maintenance)
                try await admin.query("select pg_terminate_backend($1::int)", [pid])
                try await waitUntil(loop, "the pool noticed") { pool.value.statistics.open == 0 }
                let next = try await onLoop(loop) { done in pool.value.query("select 1") { done($0) } }
                #expect(try next.get()[0, 0] == "1")
                await admin.close()
                try await onLoop(loop) { done in
                    pool.value.close()
                    done(())
                }
            }
        }
    }

    @Test func waiterTimesOutWhenNoConnectionIsReleased() async throws {
        try await TestDatabase.with { database in
            try await withLoop { loop in
                let pool = try await makePool(
                    on: loop, database.configuration, maxConnections: 1, maxWaiters: 1, waitTimeoutMilliseconds: 100)
                // The first lease also connects, which can take longer than 100 ms on a busy machine: retry it.
                var held: LoopBound<PostgresConnection>?
                for _ in 0..<50 where held == nil {
                    held = try? await onLoop(loop) { done in
                        pool.value.lease { done($0.map { LoopBound($0, loop: loop) }) }
                    }.get()
                }
                let connection = try #require(held)
                let (queueFull, timedOut): (PostgresError?, PostgresError?) = try await onLoop(loop) { done in
                    var queueFull: PostgresError?
                    pool.value.lease { result in
                        if case .failure(let error) = result { done((queueFull, error)) }
                    }
                    pool.value.lease { result in
                        if case .failure(let error) = result { queueFull = error }
                    }
                    #expect(pool.value.statistics.waiting == 1)
                }
                #expect(queueFull?.kind == .poolExhausted && queueFull?.isRetryable == true)
                #expect(timedOut?.kind == .poolExhausted && timedOut?.isRetryable == true)
                // The held connection goes back and serves the next caller.
                let next = try await onLoop(loop) { done in
                    pool.value.release(connection.value)
                    pool.value.query("select 2") { done($0) }
                }
                #expect(try next.get()[0, 0] == "2")
                let afterClose = try await onLoop(loop) { done in
                    pool.value.close()
                    pool.value.query("select 3") { done($0) }
                }
                guard case .failure(let closed) = afterClose else {
                    Issue.record("a closed pool must refuse queries")
                    return
                }
                #expect(closed.kind == .poolClosed)
            }
        }
    }

    @Test func pipelineThroughThePool() async throws {
        try await TestDatabase.with { database in
            try await withLoop { loop in
                let pool = try await makePool(on: loop, database.configuration, maxConnections: 2)
                let results = try await onLoop(loop) { done in
                    pool.value.pipeline([
                        PostgresStatement("select set_config('ferry.device_id', $1, true)", ["d1"], preparedName: "id"),
                        PostgresStatement("select current_setting('ferry.device_id')"),
                    ]) { done($0) }
                }.get()
                #expect(results[1][0, 0] == "d1")
                try await onLoop(loop) { done in
                    pool.value.close()
                    done(())
                }
            }
        }
    }
}
