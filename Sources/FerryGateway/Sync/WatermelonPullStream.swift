import FerryAuth
import FerryHTTP
import FerryJSON
import FerryLoop
import FerryPostgres

/// One streamed answer to `GET /v1/watermelon/sync`: WatermelonDB's contract has no
/// paging, so a big account's first sync is one answer of any size, written as it is read.
///
/// On one leased connection, in one transaction: `begin`, the identity statement,
/// ``WatermelonPullOpen`` and the first `fetch` in one pipeline (the timestamp issued
/// and the cursor opened in one snapshot; a failure here is still an ordinary error
/// answer, and an answer the first batch holds whole is an ordinary answer too), then
/// `fetch` after `fetch` of the cursor, each batch written as one chunk of a chunked
/// `200` on the connection taken over from HTTP, then `commit`, and only after the
/// commit the answer's last bytes (`"timestamp"` and the zero-size chunk). So the gateway holds one
/// batch and the socket's unsent bytes (up to its high-water mark) per answer, whatever
/// the account's size; each statement is short, so `statement_timeout` cuts none of
/// them; and the whole answer is bounded by ``maxMilliseconds``.
///
/// A failure after the head (the database, the time bound, records out of order) closes
/// the connection without the last chunk: the client sees a truncated body, never a
/// complete-looking one. A client that goes away ends the transaction as soon as the
/// batch in flight is back. Loop thread only; the connection keeps it alive.
final class WatermelonPullStream: TCPConnectionDelegate {
    /// Rows of the first batch; later batches aim at ``batchBytes``.
    static let firstBatchRows = 200
    /// The most rows in one batch.
    static let maxBatchRows = 5_000
    /// The bytes one batch aims at: with the socket's high-water mark, most of what one
    /// answer holds in memory.
    static let batchBytes = 1 << 20

    private let context: LoopContext
    private let caller: Identity
    private let connection: PostgresConnection
    private let tables: [String]
    private let timestamp: Int
    private let maxMilliseconds: UInt64
    private let startedAt: UInt64
    /// Who asked, for the log line.
    private let remote: ClientAddress?
    private var tcp: TCPConnection?
    private var deadline: Timer?

    /// The table whose records are being written (an index into ``tables``), -1 before the first.
    private var table = -1
    private var inDeleted = false
    private var arrayIsEmpty = true
    private var batchRows = WatermelonPullStream.firstBatchRows
    private var unsafeRecords = 0
    private var bytesSent = 0
    private var fetching = false
    private var waitingForDrain = false
    /// The answer is over (completed, failed or abandoned): nothing more is written.
    private var ended = false
    private var released = false

    private init(
        context: LoopContext, caller: Identity, connection: PostgresConnection, opened: WatermelonPullOpen.Answer,
        maxMilliseconds: UInt64, remote: ClientAddress?
    ) {
        self.remote = remote
        self.context = context
        self.caller = caller
        self.connection = connection
        self.tables = opened.tables
        self.timestamp = opened.timestamp
        self.maxMilliseconds = maxMilliseconds
        startedAt = MonotonicClock.now()
    }

    /// Answers `pull` as `caller` on `responder`'s connection. Until the cursor is open,
    /// failures are answered by `refusal` as the route answers them. The first batch is
    /// fetched in the opening's pipeline: an answer it holds whole (an incremental sync,
    /// most of them) is committed and answered as any other, `Content-Length` and
    /// keep-alive; only a bigger one is streamed.
    static func answer(
        _ pull: WatermelonPullOpen, as caller: Identity, responder: HTTPResponder, context: LoopContext,
        maxMilliseconds: UInt64, remote: ClientAddress?, refusal: @escaping (QueryFailure) -> APIError
    ) {
        guard context.admit(caller, answering: responder) else { return }
        context.pool.lease { leased in
            let connection: PostgresConnection
            switch leased {
            case .failure(let error):
                context.requests.finish(caller)
                return responder.respond(refusal(.database(error)).response)
            case .success(let leasedConnection):
                connection = leasedConnection
            }
            let statements = [
                WatermelonPullCursor.begin, caller.statement(timeout: context.pool.statementTimeoutSetting),
                pull.statement,
                WatermelonPullCursor.fetch(firstBatchRows),
            ]
            connection.pipeline(statements) { outcome in
                let opened = WatermelonPullOpen.decode(outcome.map { $0[2] })
                guard case .success(let answer) = opened, case .success(let results) = outcome else {
                    if case .failure(let failure) = opened { responder.respond(refusal(failure).response) }
                    return end(connection, caller: caller, context: context)
                }
                let stream = WatermelonPullStream(
                    context: context, caller: caller, connection: connection, opened: answer,
                    maxMilliseconds: maxMilliseconds, remote: remote)
                let first = results[3]
                if first.count < firstBatchRows {
                    stream.answerWhole(first, responder: responder, refusal: refusal)
                } else if !responder.takeOver({ tcp, _ in stream.start(on: tcp, first: first) }) {
                    end(connection, caller: caller, context: context)
                }
            }
        }
    }

    /// Rolls the transaction back (whatever state it is in) and gives the connection and
    /// the request's place in flight back.
    private static func end(_ connection: PostgresConnection, caller: Identity, context: LoopContext) {
        connection.query(WatermelonPullCursor.rollback) { _ in
            context.pool.release(connection)
            context.requests.finish(caller)
        }
    }

    // MARK: - Writing

    /// The whole answer is `rows`: commit, then answer it as HTTP answers any request.
    private func answerWhole(
        _ rows: PostgresResult, responder: HTTPResponder, refusal: @escaping (QueryFailure) -> APIError
    ) {
        var body = Array(#"{"changes":{"#.utf8)
        if let problem = append(rows, to: &body) {
            context.logger.log(.error, "watermelon pull: \(problem)")
            responder.respond(APIError.unexpected.response)
            return release()
        }
        appendEnd(to: &body)
        connection.query(WatermelonPullCursor.commit) { [self] result in
            if case .failure(let error) = result {
                responder.respond(refusal(.database(error)).response)
                return release()
            }
            giveBack()
            logUnsafeRecords()
            responder.respond(.json(bytes: body))
        }
    }

    private func start(on tcp: TCPConnection, first: PostgresResult) {
        self.tcp = tcp
        tcp.delegate = self
        // Read only to learn that the client went away; what it sends is dropped.
        tcp.startReading()
        tcp.write(ChunkedResponse.head(contentType: "application/json"))
        ChunkedResponse.write(Array(#"{"changes":{"#.utf8), to: tcp)
        deadline = context.loop.schedule(after: maxMilliseconds) { [weak self] in
            self?.fail("the answer took longer than FERRY_WATERMELON_PULL_SECONDS")
        }
        write(first)
    }

    private func fetch() {
        fetching = true
        connection.query(WatermelonPullCursor.fetch(batchRows)) { [self] result in
            fetching = false
            guard !ended else { return release() }
            switch result {
            case .failure(let error):
                fail("the database failed: \(error)")
            case .success(let rows) where rows.count == 0:
                finish()
            case .success(let rows):
                write(rows)
            }
        }
    }

    private func write(_ rows: PostgresResult) {
        guard let tcp else { return }
        var chunk: [UInt8] = []
        chunk.reserveCapacity(Self.batchBytes + Self.batchBytes / 4)
        if let problem = append(rows, to: &chunk) { return fail(problem) }
        bytesSent += chunk.count
        ChunkedResponse.write(chunk, to: tcp)
        let perRow = max(chunk.count / max(rows.count, 1), 1)
        batchRows = min(max(Self.batchBytes / perRow, 1), Self.maxBatchRows)
        if tcp.unsentBytes > tcp.highWaterMark {
            waitingForDrain = true
        } else {
            fetch()
        }
    }

    /// Appends the records of `rows` to `bytes`, with the table keys and array brackets
    /// between them; what is wrong with the rows, if anything (nothing more is appended).
    private func append(_ rows: PostgresResult, to bytes: inout [UInt8]) -> String? {
        guard rows.columns == ["name", "deleted", "record"] else {
            return "the cursor's columns are \(rows.columns), not (name, deleted, record)"
        }
        for row in 0..<rows.count {
            guard let name = rows[row, 0], let deleted = rows[row, 1] else { return "a record without a table" }
            guard enter(name, deleted: deleted == "t", into: &bytes) else {
                return "the cursor's records are out of order (\(name))"
            }
            if rows.isNull(row, 2) {
                unsafeRecords += 1
                continue
            }
            if !arrayIsEmpty { bytes.append(UInt8(ascii: ",")) }
            arrayIsEmpty = false
            rows.withBytes(row, 2) { bytes.append(contentsOf: $0!) }
        }
        return nil
    }

    /// Appends what follows the last record: the open table's end, the tables with
    /// nothing to send, the timestamp.
    private func appendEnd(to bytes: inout [UInt8]) {
        if table >= 0 { close(into: &bytes) }
        while table + 1 < tables.count {
            table += 1
            open(into: &bytes)
            close(into: &bytes)
        }
        bytes.append(contentsOf: #"},"timestamp":"#.utf8)
        bytes.append(contentsOf: String(timestamp).utf8)
        bytes.append(UInt8(ascii: "}"))
    }

    /// Moves the writing to `name`'s updated records, or its deleted ids: tables in the
    /// order of ``tables``, each one's updated before its deleted. False when the record
    /// is out of that order.
    private func enter(_ name: String, deleted: Bool, into chunk: inout [UInt8]) -> Bool {
        if table < 0 || tables[table] != name {
            guard let next = tables[(table + 1)...].firstIndex(of: name) else { return false }
            while table < next {
                if table >= 0 { close(into: &chunk) }
                table += 1
                open(into: &chunk)
            }
        }
        if deleted && !inDeleted {
            chunk.append(contentsOf: #"],"deleted":["#.utf8)
            inDeleted = true
            arrayIsEmpty = true
        }
        return deleted == inDeleted
    }

    private func open(into chunk: inout [UInt8]) {
        if table > 0 { chunk.append(UInt8(ascii: ",")) }
        JSONString.append(tables[table], to: &chunk)
        chunk.append(contentsOf: #":{"created":[],"updated":["#.utf8)
        inDeleted = false
        arrayIsEmpty = true
    }

    private func close(into chunk: inout [UInt8]) {
        chunk.append(contentsOf: (inDeleted ? "]}" : #"],"deleted":[]}"#).utf8)
    }

    /// The cursor is read: commit, then the last bytes, so that an answer a client sees
    /// whole names a timestamp the database kept.
    private func finish() {
        connection.query(WatermelonPullCursor.commit) { [self] result in
            guard !ended else { return release() }
            guard let tcp, case .success = result else {
                return fail("the commit failed: \(result)")
            }
            giveBack()
            var chunk: [UInt8] = []
            appendEnd(to: &chunk)
            bytesSent += chunk.count
            ChunkedResponse.write(chunk, to: tcp)
            tcp.write(ChunkedResponse.end)
            ended = true
            logUnsafeRecords()
            record()
            // The client has the whole answer once these bytes are out; bound the drain
            // by what is left of the answer's time.
            let elapsed = (MonotonicClock.now() &- startedAt) / 1_000_000
            tcp.closeAfterWrites(drainMilliseconds: max(maxMilliseconds &- min(elapsed, maxMilliseconds), 1_000))
        }
    }

    /// After the commit: the connection and the request's place in flight go back before
    /// the client has the answer, so its next request finds them free.
    private func giveBack() {
        released = true
        deadline?.close()
        deadline = nil
        context.pool.release(connection)
        context.requests.finish(caller)
    }

    private func logUnsafeRecords() {
        guard unsafeRecords > 0 else { return }
        context.logger.log(
            .warning, "watermelon pull: records left out: their ids are not WatermelonDB ids",
            ["records": String(unsafeRecords)])
    }

    /// Ends the answer short: the connection closes without the last chunk.
    private func fail(_ reason: String) {
        guard !ended else { return }
        ended = true
        context.logger.log(
            .warning, "watermelon pull cut short", ["reason": reason, "bytes": String(bytesSent)])
        record()
        tcp?.close()
        if !fetching { release() }
    }

    private func release() {
        guard !released else { return }
        released = true
        deadline?.close()
        deadline = nil
        Self.end(connection, caller: caller, context: context)
    }

    /// The request's line in the log and its count in the metrics, as HTTP logs every other
    /// request's (a taken-over connection is no longer HTTP's), once the answer is over.
    private func record() {
        let duration = MonotonicClock.now() &- startedAt
        context.metrics.recordRequest(route: WatermelonRoutes.path, status: 200, durationNanoseconds: duration)
        context.log.request(
            method: "GET", route: WatermelonRoutes.path, status: 200, durationNanoseconds: duration,
            bytes: bytesSent, remote: remote?.description)
    }

    // MARK: - TCPConnectionDelegate

    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {}

    func connectionDidReachEnd(_ connection: TCPConnection) {}

    func connectionDidDrain(_ connection: TCPConnection) {
        guard waitingForDrain, !ended else { return }
        waitingForDrain = false
        fetch()
    }

    func connectionDidClose(_ connection: TCPConnection, error: LoopError?) {
        tcp = nil
        guard !ended else { return }
        ended = true
        context.logger.log(.info, "watermelon pull: the client went away", ["bytes": String(bytesSent)])
        if !fetching { release() }
    }
}
