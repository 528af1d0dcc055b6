import Foundation

/// Runs the outbox's drain and the pulls, one pass at a time.
///
/// Level-triggered: a request (an enqueue, a cue, a reconnect, a backoff timer, `sync()`)
/// only raises a flag, and the loop runs while a flag is up, so a request during a pass
/// folds into exactly one more pass, and no failure can consume the only trigger: a
/// retryable failure arms a timer that is itself a request. Push and pull never run at
/// once, so a pull's acknowledgement (`last_mutation_id`) never races a push's answer.
actor SyncEngine {
    /// Limits and timings; the defaults suit an app, tests shorten them.
    struct Settings: Sendable {
        /// Most mutations in one push (the server's default limit is 1,000).
        var pushBatchLimit = 500
        /// About this many bytes of mutations in one push (the server's body limit is 1 MiB).
        var pushBatchBytes = 512 * 1024
        /// Rows per pull page.
        var pullLimit = 1000
        /// When a failed pass is tried again.
        var retry = RetryPolicy()
        /// How long an enqueue waits for more before the drain starts.
        var debounce: TimeInterval = 0.01
    }

    /// What one pass did.
    private struct PassResult: Sendable {
        var push: FerryError?
        var pull: FerryError?
        var error: FerryError? { push ?? pull }
    }

    private let account: Account
    private let store: @Sendable () -> LocalStore?
    private let status: Broadcast<FerryStatus>
    private let events: Broadcast<FerryEvent>
    private let log: @Sendable (String) -> Void
    private let settings: Settings

    private var pushRequested = false
    private var pullRequested = false
    private var loop: Task<Void, Never>?
    private var retry: Task<Void, Never>?
    /// What the armed retry timer runs: every part that failed since it was last run.
    private var retryPush = false
    private var retryPull = false
    private var attempt = 0
    private var stopped = false
    private var schemaChecked = false
    private var passesStarted = 0
    /// The last pull left mutations it covers (`last_mutation_id`) in the outbox.
    private var answersOwed = false
    private var waiters: [(after: Int, continuation: CheckedContinuation<PassResult, Never>)] = []

    init(
        account: Account, store: @escaping @Sendable () -> LocalStore?, status: Broadcast<FerryStatus>,
        events: Broadcast<FerryEvent>, settings: Settings, log: @escaping @Sendable (String) -> Void
    ) {
        self.account = account
        self.store = store
        self.status = status
        self.events = events
        self.settings = settings
        self.log = log
    }

    // MARK: - Requests

    /// Asks for a drain (after the debounce) and, when `pull`, a pull.
    func request(push: Bool, pull: Bool, debounce: Bool = false) {
        guard !stopped else { return }
        pushRequested = pushRequested || push
        pullRequested = pullRequested || pull
        startLoop(delay: debounce ? settings.debounce : 0)
    }

    /// The connection came back (a stream opened, the app came to the foreground): the
    /// backoff starts over and both run now.
    func reconnected() {
        retry?.cancel()
        retry = nil
        (retryPush, retryPull) = (false, false)
        attempt = 0
        request(push: true, pull: true)
    }

    /// Drains the outbox, then pulls until up to date; throws the first failure.
    func sync() async throws(FerryError) {
        if let error = await pass(push: true, pull: true).error { throw error }
    }

    /// Drains the outbox; throws when it could not be emptied (before link and sign-in).
    func drain() async throws(FerryError) {
        if let error = await pass(push: true, pull: false).push { throw error }
        let pending = store()?.pendingCount ?? 0
        if pending > 0 { throw .outboxNotEmpty(pending: pending) }
    }

    /// Pulls until up to date.
    func pull() async throws(FerryError) {
        if let error = await pass(push: false, pull: true).pull { throw error }
    }

    /// Stops: no new pass starts, the retry timer goes, and the pass in flight is
    /// cancelled and awaited (its requests have deadlines, so this ends).
    func stop() async {
        stopped = true
        retry?.cancel()
        retry = nil
        pushRequested = false
        pullRequested = false
        if let loop {
            loop.cancel()
            await loop.value
        }
        for waiter in waiters { waiter.continuation.resume(returning: PassResult(push: .signedOut)) }
        waiters.removeAll()
    }

    /// Undoes ``stop()`` (after a sign-in): the next request runs, and the schema is read again.
    func resume() {
        stopped = false
        schemaChecked = false
        attempt = 0
    }

    // MARK: - The loop

    /// Requests a pass and waits for one that started after the request.
    private func pass(push: Bool, pull: Bool) async -> PassResult {
        guard !stopped else { return PassResult(push: .signedOut) }
        let after = passesStarted
        return await withCheckedContinuation { continuation in
            waiters.append((after, continuation))
            request(push: push, pull: pull)
        }
    }

    private func startLoop(delay: TimeInterval) {
        guard loop == nil else { return }
        loop = Task {
            if delay > 0 { try? await Task.sleep(for: .seconds(delay)) }
            await self.run()
        }
    }

    private func run() async {
        while (pushRequested || pullRequested) && !stopped && !Task.isCancelled {
            let push = pushRequested
            let pull = pullRequested
            pushRequested = false
            pullRequested = false
            passesStarted += 1
            let number = passesStarted
            var result = PassResult()
            if push { result.push = await outcome(pushing: true) }
            // A pull after a failed push still runs: it is independent, and it may
            // acknowledge what the lost push answer did not.
            if pull { result.pull = await outcome(pushing: false) }
            // The pull covered mutations still queued (their push answers were lost): the
            // next push learns what became of them. Not after a failed push, which would
            // fail again at once.
            if answersOwed && result.push == nil { pushRequested = true }
            answersOwed = false
            finish(pass: number, result)
        }
        // No await since the condition was checked: a request made meanwhile would have
        // found this loop and raised a flag it saw.
        loop = nil
    }

    private func finish(pass number: Int, _ result: PassResult) {
        if let error = result.error {
            status.update { $0.lastError = error }
            if Self.isRetriedLater(error) && !stopped {
                scheduleRetry(after: error, push: result.push != nil, pull: result.pull != nil)
            } else if !stopped {
                log("sync failed (\(error)); not retried until the next write, sync() or reconnect")
            }
            if error.isRetryable, case .unreachable = error { status.update { $0.connected = false } }
        } else {
            attempt = 0
            status.update {
                $0.lastError = nil
                $0.connected = true
            }
        }
        let ready = waiters.filter { $0.after < number }
        waiters.removeAll { $0.after < number }
        for waiter in ready { waiter.continuation.resume(returning: result) }
    }

    /// Whether a pass that failed with `error` is run again by the backoff timer: after
    /// every failure that time may cure (``FerryError/isRetryable``), and after those that
    /// left the outbox as it was for a reason of the moment: an answer that did not follow
    /// the protocol (a proxy's error page, a cut body), the local store or the session
    /// unreadable just then, a `401` the refresh could not cure. Not without a session
    /// (a sign-in resumes the engine), nor after a final answer (a push's is settled per
    /// mutation, so the queue has moved on).
    static func isRetriedLater(_ error: FerryError) -> Bool {
        switch error {
        case .invalidAnswer, .storage, .sessionUnreadable: true
        case .server(let server): server.retryable || server.status == 401
        default: error.isRetryable
        }
    }

    private func scheduleRetry(after error: FerryError, push: Bool, pull: Bool) {
        let retryAfter: TimeInterval? = if case .server(let server) = error { server.retryAfter } else { nil }
        let delay = settings.retry.delay(afterFailures: attempt, retryAfter: retryAfter)
        attempt += 1
        events.send(.syncFailed(error: error, retryIn: delay))
        log("sync failed (\(error)); retrying in \(String(format: "%.2f", delay)) s")
        // A new timer replaces the one armed before, so it carries what that one would
        // have run too: a failed pull's timer must not drop a failed push's.
        retryPush = retryPush || push
        retryPull = retryPull || pull
        retry?.cancel()
        retry = Task {
            try? await Task.sleep(for: .seconds(delay))
            guard !Task.isCancelled else { return }
            self.retryFired()
        }
    }

    private func retryFired() {
        retry = nil
        let (push, pull) = (retryPush, retryPull)
        (retryPush, retryPull) = (false, false)
        request(push: push, pull: pull)
    }

    /// Pushes (or pulls) on the current store; the failure, or nil.
    private func outcome(pushing: Bool) async -> FerryError? {
        guard let store = store() else { return .signedOut }
        do {
            if pushing { try await pushAll(store) } else { try await pullAll(store) }
            return nil
        } catch {
            return error
        }
    }

    // MARK: - Push

    private func pushAll(_ store: LocalStore) async throws(FerryError) {
        var limit = settings.pushBatchLimit
        // Bounded: each round removes at least one mutation or throws.
        for _ in 0..<1_000_000 {
            if Task.isCancelled { throw .unreachable("cancelled") }
            let batch: [PendingMutation]
            do { batch = try store.pendingBatch(limit: limit, maxBytes: settings.pushBatchBytes) } catch {
                throw .storage("cannot read the outbox: \(error)")
            }
            status.update { $0.pendingMutations = store.pendingCount }
            guard !batch.isEmpty else { return }
            status.update { $0.uploading = true }
            defer { status.update { $0.uploading = false } }
            FaultPoint.reach(.pushBeforeSend)
            let answer = try await account.authorized(
                "POST", "/v1/push", body: ["mutations": .array(batch.map(\.pushJSON))])
            if answer.status == 200 {
                FaultPoint.reach(.pushAnswered)
                try settle(batch, try answer.decode(PushAnswer.self, "a push answer"), in: store)
                limit = settings.pushBatchLimit
                continue
            }
            let error = answer.error
            if answer.status == 413 && batch.count > 1 {
                limit = max(1, batch.count / 2)
                continue
            }
            // Retried later as a whole: what may pass unchanged, and a 401 the account's
            // refresh could not cure this time.
            if error.retryable || answer.status == 401 {
                throw .server(error)
            }
            // A final answer for the whole batch (a constraint checked at commit, a shape
            // the server refuses): push one at a time to find the mutation, which is then
            // rejected alone. The queue never stalls on it.
            if batch.count > 1 {
                limit = 1
                continue
            }
            try reject(batch[0], code: error.code, message: error.message, in: store)
            limit = settings.pushBatchLimit
        }
    }

    /// Takes the answered mutations out of the outbox, each by its outcome: a duplicate
    /// counts as what it first was (`original`), so a rejection whose answer was lost is
    /// still undone and reported; a duplicate the server no longer remembers counts as applied.
    private func settle(_ batch: [PendingMutation], _ answer: PushAnswer, in store: LocalStore) throws(FerryError) {
        var applied: [PendingMutation] = []
        var rejected: [(PendingMutation, String, String)] = []
        var duplicates = 0
        let byID = Dictionary(batch.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        for result in answer.results {
            guard let mutation = byID[result.id] else { continue }
            if result.wasRejected {
                rejected.append((mutation, result.code ?? "rejected", result.message ?? ""))
            } else {
                if result.status == .duplicate { duplicates += 1 }
                applied.append(mutation)
            }
        }
        do { try store.settle(applied: applied, rejected: rejected.map(\.0)) } catch {
            throw .storage("cannot update the outbox: \(error)")
        }
        if duplicates > 0 {
            log("push: \(duplicates) mutations were applied before (duplicate): a lost answer's retry")
        }
        for (mutation, code, message) in rejected { report(mutation, code: code, message: message) }
        status.update { $0.pendingMutations = store.pendingCount }
    }

    private func reject(_ mutation: PendingMutation, code: String, message: String, in store: LocalStore)
        throws(FerryError)
    {
        do { try store.settle(applied: [], rejected: [mutation]) } catch {
            throw .storage("cannot update the outbox: \(error)")
        }
        report(mutation, code: code, message: message)
    }

    private func report(_ mutation: PendingMutation, code: String, message: String) {
        log(
            "the server rejected mutation \(mutation.id) (\(mutation.op.rawValue) into \(mutation.table)): \(code): \(message)"
        )
        events.send(
            .mutationRejected(
                RejectedMutation(
                    id: mutation.id, table: mutation.table, op: mutation.op, row: mutation.body, code: code,
                    message: message)))
        if code == "lock_not_held", let schema = store()?.tables[mutation.table] {
            let key = schema.key.first { $0 != schema.owner }.flatMap { mutation.body[$0] }
            events.send(.lockLost(table: mutation.table, key: key?.stringValue ?? key?.jsonText ?? ""))
        }
    }

    // MARK: - Pull

    /// Reads `GET /v1/schema` into the store (a change there resets the cursor).
    func refreshSchema(_ store: LocalStore) async throws(FerryError) {
        let answer = try await account.authorized("GET", "/v1/schema")
        guard answer.status == 200 else { throw .server(answer.error) }
        let schema = try answer.decode(SchemaAnswer.self, "a schema answer").tables
        do { try store.apply(schema: schema) } catch { throw .storage("cannot mirror the schema: \(error)") }
        schemaChecked = true
    }

    private func pullAll(_ store: LocalStore) async throws(FerryError) {
        if !schemaChecked { try await refreshSchema(store) }
        var schemaReread = false
        var resets = 0
        var changed: Set<String> = []
        status.update { $0.downloading = true }
        defer { status.update { $0.downloading = false } }
        // Bounded: a pull that never ends (a server that says has_more forever) stops here.
        for _ in 0..<100_000 {
            if Task.isCancelled { throw .unreachable("cancelled") }
            let cursor = store.cursor
            var query = [("limit", String(settings.pullLimit))]
            if let cursor { query.append(("cursor", cursor)) }
            let answer = try await account.authorized("GET", "/v1/pull", query: query)
            if answer.status == 409 || answer.status == 400,
                ["cursor_expired", "invalid_cursor"].contains(answer.error.code), cursor != nil, resets < 3
            {
                // The cursor is older than tombstone retention (or no longer ours): drop the
                // rows (the outbox stays) and load everything afresh.
                log("pull: \(answer.error.code); loading every row afresh")
                resets += 1
                do { try store.wipeSyncedTables() } catch { throw .storage("cannot reset the store: \(error)") }
                continue
            }
            guard answer.status == 200 else { throw .server(answer.error) }
            let page = try answer.decode(PullPage.self, "a pull answer")
            let known = store.tables
            if !schemaReread && page.changes.keys.contains(where: { known[$0] == nil }) {
                // A table the schema did not have: read it again (that resets the cursor).
                schemaReread = true
                try await refreshSchema(store)
                continue
            }
            let merged: Bool
            do { merged = try store.merge(page, startedFrom: cursor, syncedAt: Date()) } catch {
                throw .storage("cannot merge the pull: \(error)")
            }
            if merged {
                let tables = Set(page.changes.filter { !$0.value.upserts.isEmpty || !$0.value.deletes.isEmpty }.keys)
                changed.formUnion(tables)
                status.update {
                    $0.pendingMutations = store.pendingCount
                    $0.lastSyncedAt = store.lastSyncedAt ?? $0.lastSyncedAt
                }
                if !page.hasMore {
                    answersOwed = store.hasPending(through: page.lastMutationID)
                    events.send(.pulled(tables: changed))
                    return
                }
            }
        }
        throw .invalidAnswer("the pull did not end")
    }
}
