import FerryPostgres
import FerryTestSupport
import Testing

@Suite(.tagSelection) struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine
    let one = PostgresResult(columns: ["n"], rows: [["1"]], commandTag: "SELECT 1")
    let ok = PostgresResult(columns: [], rows: [], commandTag: "INSERT 0 1")

    func connectedMachine() -> Machine {
        var machine = Machine()
        #expect(machine.connected() == .none)
        return machine
    }

    @Test func operationsAskedForWhileConnectingStartWhenConnected() {
        var machine = Machine()
        #expect(machine.enqueue(1, .simple("select 1")) == .none)
        #expect(machine.connected() == .send(.simple(1, "select 1")))
        #expect(machine.isBusy)
    }

    @Test func operationsRunOneAtATimeInOrder() {
        var machine = connectedMachine()
        #expect(machine.enqueue(1, .simple("select 1")) == .send(.simple(1, "select 1")))
        #expect(machine.enqueue(2, .simple("select 2")) == .none)
        #expect(machine.pendingCount == 2)
        #expect(machine.resultReceived(.result(one)) == .none)
        #expect(
            machine.resultReceived(.end)
                == .complete(.init(id: 1, result: .success([one])), next: .simple(2, "select 2")))
        #expect(machine.resultReceived(.end) == .complete(.init(id: 2, result: .success([])), next: nil))
        #expect(machine.state == .idle)
    }

    @Test func pipelineCollectsOneResultPerStatementUntilSync() {
        var machine = connectedMachine()
        let statements: [PostgresStatement] = ["select set_config('a', '1', true)", "insert into t values (1)"]
        #expect(
            machine.enqueue(1, .pipeline(statements))
                == .send(.pipeline(1, statements.map(Machine.Step.execute))))
        for event: Machine.ResultEvent in [.result(one), .end, .result(ok), .end] {
            #expect(machine.resultReceived(event) == .none)
        }
        #expect(machine.resultReceived(.sync) == .complete(.init(id: 1, result: .success([one, ok])), next: nil))
    }

    @Test func namedStatementIsPreparedOnlyOnce() {
        var machine = connectedMachine()
        let statement = PostgresStatement("select $1::int", ["1"], preparedName: "pick")
        #expect(
            machine.enqueue(1, .pipeline([statement, statement]))
                == .send(
                    .pipeline(
                        1,
                        [
                            .prepare(name: "pick", sql: "select $1::int", parameterCount: 1), .execute(statement),
                            .execute(statement),
                        ])))
        let prepared = PostgresResult(columns: [], rows: [], commandTag: "")
        for event: Machine.ResultEvent in [.result(prepared), .end, .result(one), .end, .result(one), .end] {
            #expect(machine.resultReceived(event) == .none)
        }
        #expect(machine.resultReceived(.sync) == .complete(.init(id: 1, result: .success([one, one])), next: nil))
        #expect(machine.prepared == ["pick"])
        #expect(machine.enqueue(2, .pipeline([statement])) == .send(.pipeline(2, [.execute(statement)])))
    }

    @Test func withoutPreparingANamedStatementIsSentUnnamed() {
        var machine = Machine(preparesStatements: false)
        #expect(machine.connected() == .none)
        let statement = PostgresStatement("select $1::int", ["1"], preparedName: "pick")
        let unnamed = PostgresStatement("select $1::int", ["1"])
        #expect(
            machine.enqueue(1, .pipeline([statement, statement]))
                == .send(.pipeline(1, [.execute(unnamed), .execute(unnamed)])))
        for event: Machine.ResultEvent in [.result(one), .end, .result(one), .end] {
            #expect(machine.resultReceived(event) == .none)
        }
        #expect(machine.resultReceived(.sync) == .complete(.init(id: 1, result: .success([one, one])), next: nil))
        #expect(machine.prepared.isEmpty)
    }

    @Test func failedPrepareIsNotCached() {
        var machine = connectedMachine()
        let statement = PostgresStatement("selec 1", preparedName: "typo")
        _ = machine.enqueue(1, .pipeline([statement]))
        let syntax = PostgresError(.server, "syntax error", sqlState: "42601", severity: "ERROR")
        for event: Machine.ResultEvent in [.failure(syntax), .end, .pipelineAborted, .end] {
            #expect(machine.resultReceived(event) == .none)
        }
        #expect(machine.resultReceived(.sync) == .complete(.init(id: 1, result: .failure(syntax)), next: nil))
        #expect(machine.prepared.isEmpty)
        #expect(machine.state == .idle)
    }

    @Test func errorMidPipelineFailsTheOperationWithTheFirstError() {
        var machine = connectedMachine()
        _ = machine.enqueue(1, .pipeline(["select 1", "select 1/0", "select 3"]))
        let division = PostgresError(.server, "division by zero", sqlState: "22012", severity: "ERROR")
        for event: Machine.ResultEvent in [.result(one), .end, .failure(division), .end, .pipelineAborted, .end] {
            #expect(machine.resultReceived(event) == .none)
        }
        #expect(machine.resultReceived(.sync) == .complete(.init(id: 1, result: .failure(division)), next: nil))
    }

    @Test func anErrorAtTheSyncsCommitFailsThePipelineAndKeepsTheConnection() {
        var machine = connectedMachine()
        _ = machine.enqueue(1, .pipeline(["select 1", "insert into t values (1)"]))
        // A deferred foreign key checked when the Sync commits: an error after the last result.
        let deferred = PostgresError(.server, "violates foreign key constraint", sqlState: "23503", severity: "ERROR")
        for event: Machine.ResultEvent in [.result(one), .end, .result(ok), .end, .failure(deferred), .end] {
            #expect(machine.resultReceived(event) == .none)
        }
        #expect(machine.resultReceived(.sync) == .complete(.init(id: 1, result: .failure(deferred)), next: nil))
        #expect(machine.state == .idle)
    }

    @Test func aResultAfterTheLastStatementIsAProtocolViolation() {
        var machine = connectedMachine()
        _ = machine.enqueue(1, .pipeline(["select 1"]))
        for event: Machine.ResultEvent in [.result(one), .end, .result(one)] {
            #expect(machine.resultReceived(event) == .none)
        }
        guard case .close = machine.resultReceived(.end) else {
            Issue.record("expected close")
            return
        }
        #expect(!machine.isUsable)
    }

    @Test func fatalErrorClosesTheConnectionAndFailsQueuedOperationsRetryably() {
        var machine = connectedMachine()
        _ = machine.enqueue(1, .pipeline(["select pg_sleep(10)"]))
        _ = machine.enqueue(2, .simple("select 2"))
        let terminated = PostgresError(
            .server, "terminating connection due to administrator command", sqlState: "57P01", severity: "FATAL")
        #expect(machine.resultReceived(.failure(terminated)) == .none)
        #expect(machine.resultReceived(.end) == .none)
        guard case .close(let completion, let failing, let error) = machine.resultReceived(.sync) else {
            Issue.record("a FATAL error must close the connection")
            return
        }
        #expect(completion == .init(id: 1, result: .failure(terminated)))
        #expect(terminated.isRetryable)
        #expect(failing == [2])
        #expect(error.kind == .connectionLost && error.isRetryable)
        #expect(!machine.isUsable)
    }

    @Test func lostConnectionFailsInFlightQueuedAndLaterOperations() {
        var machine = connectedMachine()
        _ = machine.enqueue(1, .simple("select 1"))
        _ = machine.enqueue(2, .simple("select 2"))
        let lost = PostgresError(.connectionLost, "server closed the connection unexpectedly")
        #expect(machine.failed(lost) == .close(nil, failing: [1, 2], error: lost))
        #expect(machine.enqueue(3, .simple("select 3")) == .complete(.init(id: 3, result: .failure(lost)), next: nil))
        #expect(machine.failed(lost) == .none)
        #expect(lost.isRetryable)
    }

    @Test func passedDeadlineFailsWithTimeoutAndGivesUpTheConnection() {
        var machine = connectedMachine()
        _ = machine.enqueue(1, .simple("select pg_sleep(100)"))
        _ = machine.enqueue(2, .simple("select 2"))
        #expect(machine.deadlineExceeded(7) == .none)
        guard case .close(let completion, let failing, let error) = machine.deadlineExceeded(1) else {
            Issue.record("a passed deadline must close the connection")
            return
        }
        guard case .failure(let timeout) = completion?.result else {
            Issue.record("the operation must fail")
            return
        }
        #expect(timeout.kind == .timeout && timeout.isRetryable)
        #expect(failing == [2] && error.isRetryable)
    }

    @Test func syncOutsidePipelineModeIsAProtocolViolation() {
        var machine = connectedMachine()
        _ = machine.enqueue(1, .simple("select 1"))
        guard case .close(let completion, _, _) = machine.resultReceived(.sync) else {
            Issue.record("expected close")
            return
        }
        #expect(completion?.id == 1)
        #expect(!machine.isUsable)
    }

    @Test func textWithANULIsRefusedBeforeItIsSentAndTheOperationInFlightGoesOn() {
        var machine = connectedMachine()
        #expect(machine.enqueue(1, .simple("select 1")) == .send(.simple(1, "select 1")))
        let refusal = PostgresError(
            .unsendableText, #"parameter $2 holds a NUL byte (\u0000), which PostgreSQL text cannot hold"#)
        let statements = [PostgresStatement("select $1, $2", ["fine", "cut\u{0}here"])]
        #expect(machine.enqueue(2, .pipeline(statements)) == .refuse(.init(id: 2, result: .failure(refusal))))
        let sql = PostgresError(.unsendableText, "the SQL holds a NUL byte, which PostgreSQL text cannot hold")
        #expect(machine.enqueue(3, .simple("select 1;\u{0} drop t")) == .refuse(.init(id: 3, result: .failure(sql))))
        #expect(machine.pendingCount == 1)
        #expect(machine.resultReceived(.result(one)) == .none)
        #expect(machine.resultReceived(.end) == .complete(.init(id: 1, result: .success([one])), next: nil))
    }

    @Test func textWithANULIsRefusedAsFinalEvenOnAClosedConnection() {
        var machine = connectedMachine()
        _ = machine.failed(PostgresError(.connectionLost, "gone"))
        let statement = PostgresStatement("select $1", ["\u{0}"])
        guard case .refuse(let completion) = machine.enqueue(1, .pipeline([statement])),
            case .failure(let error) = completion.result
        else {
            Issue.record("not refused")
            return
        }
        #expect(error.kind == .unsendableText)
        #expect(error.cause == .invalidData)
        #expect(!error.isRetryable)
    }
}

@Suite(.tagSelection) struct ValueTests {
    @Test func resultSubscriptsByIndexAndName() {
        let result = PostgresResult(
            columns: ["id", "body"], rows: [["1", "{\"a\":1}"], ["2", nil]], commandTag: "SELECT 2")
        #expect(result.affectedRows == 2)
        #expect(result[0, "body"] == "{\"a\":1}")
        #expect(result[1, 1] == nil && result.isNull(1, 1))
        #expect(result.bytes(0, 1) == Array("{\"a\":1}".utf8))
        #expect(result[row: 1]["id"] == "2")
        #expect(result[0, "nope"] == nil)
        #expect(result.withBytes(0, 0) { $0?.count } == 1)
        #expect(PostgresResult(columns: [], rows: [], commandTag: "CREATE TABLE").affectedRows == nil)
    }

    @Test func configurationReadsURLsAndConninfo() throws {
        let url = try PostgresConfiguration(
            "postgresql://ferry@db.example:6543/app?sslmode=disable", statementTimeoutMilliseconds: 2_000)
        #expect(url.parameters["host"] == "db.example")
        #expect(url.parameters["port"] == "6543")
        #expect(url.database("other").parameters["dbname"] == "other")
        #expect(url.operationTimeoutMilliseconds == 7_000)
        // pgbouncer refuses a start-up `options` parameter: the timeout is set per transaction.
        #expect(!url.startupParameters.contains { $0.0 == "options" }, "\(url.startupParameters)")
        let conninfo = try PostgresConfiguration("host=/var/run/postgresql dbname=ferry")
        #expect(conninfo.parameters["dbname"] == "ferry")
        #expect(throws: PostgresError.self) { try PostgresConfiguration("postgresql://[broken") }
    }

    @Test func retryableErrors() {
        #expect(PostgresError(.server, "", sqlState: "40001").isRetryable)
        #expect(PostgresError(.server, "", sqlState: "40P01").isRetryable)
        #expect(PostgresError(.server, "", sqlState: "57P01").isRetryable)
        #expect(PostgresError(.server, "", sqlState: "57014").isRetryable, "statement timeout")
        #expect(PostgresError(.server, "", sqlState: "55P03").isRetryable, "lock timeout")
        #expect(PostgresError(.server, "", sqlState: "53200").isRetryable, "out of memory")
        #expect(!PostgresError(.server, "", sqlState: "22P05").isRetryable)
        #expect(PostgresError(.server, "", sqlState: "22P05").cause == .invalidData)
        #expect(PostgresError(.server, "", sqlState: "54001").cause == .invalidData)
        #expect(PostgresError(.server, "", sqlState: "23505").cause == .conflict)
        #expect(PostgresError(.server, "", sqlState: "42501").cause == .server)
        #expect(!PostgresError(.server, "", sqlState: "23505").isRetryable)
        #expect(PostgresError(.poolExhausted, "").isRetryable)
        #expect(!PostgresError(.poolClosed, "").isRetryable)
    }
}
