import Foundation
import Synchronization

/// An offline-first app's side of Ferry: a local SQLite store of the synced tables, a
/// durable outbox, and the sync that moves both ways.
///
/// ```swift
/// let ferry = try await FerryClient(server: URL(string: "https://sync.example.com")!, stateDirectory: folder)
/// try ferry.enqueue(.upsert, into: "tasks", ["id": "t-1", "title": "Buy milk"])   // at the write site
/// for await _ in ferry.changes(to: ["tasks"]) { reload() }                          // the UI follows the store
/// ```
///
/// The first launch signs up anonymously (no UI); the session is kept in a
/// ``SessionStore`` and never discarded at launch. Writes go to the local store and the
/// outbox in one SQLite transaction and are pushed in the background; pulls merge into
/// the same store, with pending writes replayed on top. Every method may be called from
/// any thread or task.
public final class FerryClient: Sendable {
    /// How a client behaves; the defaults suit an app.
    public struct Configuration: Sendable {
        /// Where the session's tokens live. nil: the Keychain on Apple platforms, a 0600
        /// file (`session.json`) in the state folder elsewhere.
        public var sessionStore: (any SessionStore)?
        /// The most any one request may take, in seconds, from start to last byte.
        public var requestTimeout: TimeInterval = 30
        /// Whether writes are pushed, and the session refreshed, in the background. Off,
        /// nothing moves until ``sync()`` (a command-line tool's way).
        public var syncsAutomatically = true
        /// Whether, while syncing automatically, the client holds the cue stream (and pulls
        /// when told to). Off, it pulls at launch, on `sync()`, on foreground and on retries.
        public var holdsCueStream = true
        /// Seconds between the heartbeats of a held lock (the server's default stale limit is 30 s).
        public var lockHeartbeatInterval: TimeInterval = 10
        /// Where the client's log lines go (rejected mutations, retries, session ends);
        /// standard error by default.
        public var log: @Sendable (String) -> Void = { line in
            FileHandle.standardError.write(Data("ferry: \(line)\n".utf8))
        }
        /// The backoff of a failed push or pull: the first retry within `retryBase` seconds,
        /// doubling (with full jitter) up to `retryCap`.
        public var retryBase: TimeInterval = 0.5
        /// The longest wait between retries, in seconds (see ``retryBase``).
        public var retryCap: TimeInterval = 60

        var retryPolicy: RetryPolicy { RetryPolicy(base: retryBase, cap: retryCap) }

        /// The defaults, which suit an app.
        public init() {}
    }

    /// The gateway's URL.
    public let server: URL
    /// The folder this client keeps its files in: one per device (and per app).
    public let stateDirectory: URL

    let configuration: Configuration
    let account: Account
    let engine: SyncEngine
    let statusBroadcast = Broadcast(FerryStatus(), replaysCurrent: true)
    let eventBroadcast = Broadcast<FerryEvent>(.accountChanged(nil), replaysCurrent: false)
    private let current = Shared(Current())
    private let observers = Mutex<[UUID: TableObserver]>([:])
    let heartbeats = Mutex<[String: Task<Void, Never>]>([:])
    private let refresher = Mutex<Task<Void, Never>?>(nil)
    private let cues = Shared<CueListener?>(nil)

    /// The cue stream and the task that acts on its events.
    private struct CueListener: Sendable {
        var stream: CueStream
        var task: Task<Void, Never>
    }

    private struct Current: Sendable {
        var store: LocalStore?
        var user: FerryUser?
    }

    private struct TableObserver {
        var tables: Set<String>?
        var continuation: AsyncStream<Set<String>>.Continuation
    }

    /// Opens the client on `stateDirectory` (created when missing).
    ///
    /// On the first launch (no session and no record of one) it signs up anonymously,
    /// which needs the server once: offline, this throws ``FerryError/unreachable(_:)``
    /// and nothing is written. A session that cannot be read (a locked Keychain, an
    /// unreadable file) throws ``FerryError/sessionUnreadable(_:)`` and discards nothing:
    /// try again later. Otherwise it opens the account's local store at once, offline too.
    public init(server: URL, stateDirectory: URL, configuration: Configuration = Configuration()) async throws {
        self.server = server
        self.stateDirectory = stateDirectory
        self.configuration = configuration
        do {
            try FileManager.default.createDirectory(
                at: stateDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw FerryError.storage("cannot create \(stateDirectory.path): \(error)")
        }
        let directory = stateDirectory.path
        let sessionStore = configuration.sessionStore ?? Self.defaultSessionStore(directory: directory)
        let api = GatewayAPI(server: server, timeout: configuration.requestTimeout)
        account = Account(api: api, sessionStore: sessionStore, directory: directory, log: configuration.log)
        let current = self.current
        var settings = SyncEngine.Settings()
        settings.retry = configuration.retryPolicy
        engine = SyncEngine(
            account: account, store: { current.withLock { $0.store } }, status: statusBroadcast,
            events: eventBroadcast, settings: settings, log: configuration.log)

        let session: StoredSession
        switch await account.launch() {
        case .present(let stored): session = stored
        case .unreadable(let reason): throw FerryError.sessionUnreadable(reason)
        case .fresh: session = try await account.signUpAnonymously()
        }
        let store = try openStore(for: session)
        await account.onSessionEnded { [weak self] reason in await self?.sessionWasEnded(reason: reason) }
        if store.tables.isEmpty { try? await engine.refreshSchema(store) }
        statusBroadcast.update {
            $0.pendingMutations = store.pendingCount
            $0.lastSyncedAt = store.lastSyncedAt
        }
        if configuration.syncsAutomatically {
            startRefreshing()
            await startStream()
            await engine.request(push: true, pull: true)
        }
    }

    private static func defaultSessionStore(directory: String) -> any SessionStore {
        #if canImport(Security)
            return KeychainSessionStore(
                service: Bundle.main.bundleIdentifier ?? "ferry", account: "ferry.session:" + directory)
        #else
            return FileSessionStore(path: directory + "/session.json")
        #endif
    }

    /// The local store file of `userID`.
    func storePath(for userID: String) -> String { stateDirectory.path + "/\(userID).sqlite" }

    @discardableResult
    private func openStore(for session: StoredSession) throws -> LocalStore {
        let store = try LocalStore(path: storePath(for: session.userID), userID: session.userID) { [weak self] tables in
            self?.notify(tables)
        }
        current.withLock {
            $0.store = store
            $0.user = session.user
        }
        return store
    }

    private func liveStore() throws(FerryError) -> LocalStore {
        guard let store = current.withLock({ $0.store }) else { throw .signedOut }
        return store
    }

    // MARK: - Who

    /// Who this device is signed in as (nil after sign-out).
    public var user: FerryUser? { current.withLock { $0.user } }

    // MARK: - Writing

    /// Writes `row` into the local `table` and queues it for the server, in one SQLite
    /// transaction: once this returns, a crash at any instant loses nothing, and the
    /// mutation reaches the server exactly once. Returns the local row as it now stands
    /// (for `.delete`, whose `row` is the key, the key).
    ///
    /// The owner column may be left out (it is this user). `.upsert` writes only the
    /// columns given over the row; `.insert` adds a row the server keeps as it is.
    @discardableResult
    public func enqueue(_ operation: FerryOperation, into table: String, _ row: FerryRow) throws -> FerryRow {
        let store = try liveStore()
        let local: FerryRow
        do { local = try store.enqueue(operation, into: table, row) } catch let error as LocalStoreError {
            throw FerryError.local(error)
        }
        FaultPoint.reach(.enqueueCommitted)
        // Counted again exactly after each push and pull; counting the outbox here would
        // make every enqueue cost as much as the outbox is long.
        statusBroadcast.update { $0.pendingMutations += 1 }
        if configuration.syncsAutomatically {
            let engine = self.engine
            Task { await engine.request(push: true, pull: false, debounce: true) }
        }
        return local
    }

    /// ``enqueue(_:into:_:)-(_,_,FerryRow)`` with a row of the app's own `Encodable` type (its
    /// coding keys are the column names).
    @discardableResult
    public func enqueue<Row: Encodable>(_ operation: FerryOperation, into table: String, _ row: Row) throws -> FerryRow
    {
        guard case .object(let object) = try JSONValue.encoding(row) else {
            throw FerryError.local(.invalidRow("a row encodes as a JSON object"))
        }
        return try enqueue(operation, into: table, object)
    }

    // MARK: - Reading

    /// The synced tables, as the server's schema describes them.
    public var tables: [String: TableSchema] { current.withLock { $0.store }?.tables ?? [:] }

    /// The rows of `table` in key order, optionally those matching an SQL `condition`
    /// (`"parent_id = ?1"`, with `parameters` bound to `?1`, `?2`…).
    public func rows(in table: String, where condition: String? = nil, _ parameters: [SQLValue] = []) throws
        -> [FerryRow]
    {
        do { return try liveStore().rows(in: table, where: condition, parameters) } catch let error as LocalStoreError {
            throw FerryError.local(error)
        }
    }

    /// The rows of `table` decoded into the app's own type (its coding keys are column names).
    public func rows<Row: Decodable>(
        in table: String, as type: Row.Type, where condition: String? = nil, _ parameters: [SQLValue] = []
    ) throws -> [Row] {
        try rows(in: table, where: condition, parameters).map { try JSONValue.object($0).decoded(as: type) }
    }

    /// Runs a read-only SQL query on the local store (the synced tables have the server's
    /// names and columns) and returns its rows keyed by column name.
    public func query(_ sql: String, _ parameters: [SQLValue] = []) throws -> [[String: SQLValue]] {
        try liveStore().query(sql, parameters)
    }

    // MARK: - Observing

    /// The tables each committed change touched (among `tables`; every synced table when
    /// nil): one element per local transaction, whatever its source (an enqueue, a
    /// merge, a rejected write put back), so a merge of many rows is one element.
    public func changes(to tables: Set<String>? = nil) -> AsyncStream<Set<String>> {
        let (stream, continuation) = AsyncStream.makeStream(of: Set<String>.self, bufferingPolicy: .bufferingNewest(16))
        let id = UUID()
        observers.withLock { $0[id] = TableObserver(tables: tables, continuation: continuation) }
        continuation.onTermination = { [weak self] _ in self?.observers.withLock { _ = $0.removeValue(forKey: id) } }
        return stream
    }

    /// The rows of `table` now, and again after every change to it.
    public func observe<Row: Decodable & Sendable>(_ table: String, as type: Row.Type) -> AsyncStream<[Row]> {
        let changes = self.changes(to: [table])
        return AsyncStream { continuation in
            let task = Task { [weak self] in
                if let rows = try? self?.rows(in: table, as: type) { continuation.yield(rows) }
                for await _ in changes {
                    guard let self else { break }
                    if let rows = try? self.rows(in: table, as: type) { continuation.yield(rows) }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    private func notify(_ tables: Set<String>) {
        for observer in observers.withLock({ Array($0.values) }) {
            let relevant = observer.tables.map { tables.intersection($0) } ?? tables
            if !relevant.isEmpty { observer.continuation.yield(relevant) }
        }
    }

    // MARK: - Status and events

    /// Where sync stands now.
    public var status: FerryStatus { statusBroadcast.value }

    /// The status now, then every change (a new value each time).
    public func statusUpdates() -> AsyncStream<FerryStatus> { statusBroadcast.updates() }

    /// Every event from now on (rejected mutations, lost locks, an ended session, retries).
    /// Each call is a stream of its own; all of them get every event.
    public func events() -> AsyncStream<FerryEvent> { eventBroadcast.updates() }

    // MARK: - Sync

    /// Pushes every pending mutation, then pulls until up to date, in one pass (a pass
    /// already running is not joined: this waits for one that starts after the call).
    ///
    /// Returns when the pass succeeded: the outbox held at its start was answered (each
    /// mutation applied, a duplicate of one applied before, or rejected) and the pull
    /// reached `has_more: false`. A rejected mutation does not make it throw: it is
    /// dropped, its row put back to the server's version, and it is announced as
    /// ``FerryEvent/mutationRejected(_:)`` on ``events()``.
    ///
    /// Throws the pass's first failure, a ``FerryError``; nothing is lost either way, and
    /// the outbox stays queued:
    /// - ``FerryError/unreachable(_:)``: no answer (offline, a timeout, a lost answer);
    /// - ``FerryError/server(_:)``: an answer that is an error, e.g. 5xx or 429 (its
    ///   ``ServerError/retryable`` is true) or a refusal of the pull;
    /// - ``FerryError/signedOut``: there is no session (signed out, or the server ended it);
    /// - ``FerryError/storage(_:)``: the local store could not be read or written;
    /// - ``FerryError/invalidAnswer(_:)``: the server's answer did not follow the protocol.
    ///
    /// A retryable failure (``FerryError/isRetryable``) is also retried in the background
    /// with backoff, whether or not the caller tries again.
    public func sync() async throws { try await engine.sync() }

    /// The app came to the foreground: the cue stream reconnects, and the outbox is
    /// pushed and the store pulled now (the backoff starts over).
    public func didEnterForeground() async {
        guard user != nil else { return }
        await engine.resumeIfSignedIn(true)
        await startStream()
        await engine.reconnected()
    }

    /// The app went to the background: the cue stream closes; the outbox stays.
    public func didEnterBackground() async { await stopStream() }

    /// Stops background work (stream, sync, refresh, lock heartbeats) and waits for it to end.
    public func close() async {
        await stopStream()
        await engine.stop()
        stopBackgroundTasks()
    }

    // MARK: - The cue stream

    /// Opens the cue stream (a no-op while it runs): after every (re)connect the client
    /// pushes and pulls; a cue pulls at once (its own device's echo skipped), and cues
    /// during a pull fold into one more; a stream the server ended signs out locally.
    private func startStream() async {
        guard configuration.holdsCueStream, cues.withLock({ $0 == nil }), let deviceID = user?.deviceID else { return }
        let account = self.account
        var streamConfiguration = CueStream.Configuration(serverURL: server)
        streamConfiguration.backoffBase = .milliseconds(Int(configuration.retryBase * 1000))
        streamConfiguration.backoffCap = .milliseconds(Int(min(configuration.retryCap, 30) * 1000))
        let stream = CueStream(configuration: streamConfiguration) { forceRefresh in
            try await account.accessToken(forceRefresh: forceRefresh)
        }
        let engine = self.engine
        let status = statusBroadcast
        let task = Task { [weak self] in
            for await event in stream.events {
                switch event {
                case .opened:
                    status.update { $0.connected = true }
                    await engine.reconnected()
                case .cue(let tables, let origin):
                    if origin == deviceID && !tables.isEmpty { continue }
                    // At once, not after a debounce: a wait here is added to every change's way to
                    // the screen. Cues during the pull fold into one follow-up pull.
                    await engine.request(push: false, pull: true)
                case .disconnected:
                    status.update { $0.connected = false }
                case .sessionEnded(let code):
                    await self?.account.end(reason: code == 4004 ? "account_deleted" : "session_revoked")
                }
            }
        }
        cues.withLock { $0 = CueListener(stream: stream, task: task) }
        await stream.start()
    }

    private func stopStream() async {
        guard
            let listener = cues.withLock({ current in
                defer { current = nil }
                return current
            })
        else { return }
        await listener.stream.stop()
        listener.task.cancel()
    }

    private func startRefreshing() {
        let account = self.account
        let events = eventBroadcast
        let log = configuration.log
        let retry = configuration.retryPolicy
        let task = Task {
            var failures = 0
            while !Task.isCancelled {
                guard let due = await account.refreshDue, let session = await account.session else { return }
                let wait = due.timeIntervalSinceNow
                if wait > 0 { try? await Task.sleep(for: .seconds(min(wait, 3600))) }
                guard !Task.isCancelled else { return }
                guard let now = await account.session, now.sessionID == session.sessionID else { continue }
                let dueNow = await account.refreshDue ?? .distantPast
                if dueNow > Date() { continue }
                do {
                    _ = try await account.refresh(from: now)
                    failures = 0
                } catch {
                    if case FerryError.signedOut = error { return }
                    failures += 1
                    let delay = retry.delay(afterFailures: failures)
                    log("refreshing the session failed (\(error)); retrying in \(String(format: "%.1f", delay)) s")
                    events.send(
                        .refreshFailed(error: (error as? FerryError) ?? .unreachable("\(error)"), retryIn: delay))
                    try? await Task.sleep(for: .seconds(delay))
                }
            }
        }
        refresher.withLock { $0 = task }
    }

    private func stopBackgroundTasks() {
        refresher.withLock {
            $0?.cancel()
            $0 = nil
        }
        for task in heartbeats.withLock({ tasks in
            defer { tasks.removeAll() }
            return Array(tasks.values)
        }) {
            task.cancel()
        }
    }

    // MARK: - Accounts

    /// Gives this anonymous account an email and a password (same user, every row
    /// stays). The outbox is pushed first; throws ``FerryError/outboxNotEmpty(pending:)``
    /// when it could not be.
    public func link(email: String, password: String) async throws {
        try await engine.drain()
        let session = try await account.link(email: email, password: password)
        adoptUser(session.user)
    }

    /// Confirms this account's email with the code the server mailed on
    /// ``link(email:password:)`` (when it requires confirmation): then the email can sign
    /// in. A wrong, used or expired code throws `invalid_code`; when another account
    /// confirmed the same email first, `email_in_use`, and this account is anonymous again
    /// (link another email).
    public func confirmEmail(code: String) async throws {
        do {
            adoptUser(try await account.confirmEmail(code: code).user)
        } catch {
            if let session = await account.session { adoptUser(session.user) }
            throw error
        }
    }

    /// Asks the server to mail a new confirmation code to this account's email.
    public func resendConfirmation() async throws {
        try await account.resendConfirmation()
    }

    private func adoptUser(_ user: FerryUser) {
        guard current.withLock({ $0.user }) != user else { return }
        current.withLock { $0.user = user }
        eventBroadcast.send(.accountChanged(user))
    }

    /// Signs this device in to the account of `email`.
    ///
    /// The outbox is pushed first. When this device's anonymous account has rows, the
    /// first call (without `choice`) throws ``FerryError/resolutionRequired(deviceRows:cloudRows:)``
    /// with both counts, for the app to ask "keep this device's data or the account's?";
    /// call again with the answer. Either way the device then loads the account's rows
    /// afresh (for `.keepCloud`, its own local rows are gone first).
    public func signIn(email: String, password: String, choice: SignInChoice? = nil) async throws {
        try await engine.drain()
        await stopStream()
        await engine.stop()
        let old = current.withLock { $0.store }
        let signedIn: (session: StoredSession, reset: Bool)
        do {
            signedIn = try await account.signIn(email: email, password: password, resolve: choice)
        } catch {
            await engine.resume()
            if configuration.syncsAutomatically { await startStream() }
            throw error
        }
        // The device's rows are now the account's (keep_device) or gone (keep_cloud): the
        // new account's store starts empty and loads everything.
        current.withLock { $0.store = nil }
        if let old, old.path != storePath(for: signedIn.session.userID) { removeStoreFiles(old.path) }
        if let old, old.path == storePath(for: signedIn.session.userID), signedIn.reset { removeStoreFiles(old.path) }
        let store = try openStore(for: signedIn.session)
        if !(old?.path == store.path && !signedIn.reset) { notify(Set(store.tables.keys)) }
        await engine.resume()
        eventBroadcast.send(.accountChanged(user))
        do { try await engine.sync() } catch { configuration.log("the first load after signing in failed: \(error)") }
        if configuration.syncsAutomatically {
            startRefreshing()
            await startStream()
        }
    }

    /// Changes this account's password (it must have an email). The server ends every
    /// session of the account, so its other devices must sign in again; this device
    /// carries on with a new session. Sync and the stream pause meanwhile, so that no
    /// request of the old session ends the new one. A wrong `current` throws
    /// `invalid_credentials`; an anonymous account, `forbidden`.
    public func changePassword(current: String, to new: String) async throws {
        await stopStream()
        await engine.stop()
        do {
            _ = try await account.changePassword(current: current, new: new)
        } catch {
            await resumeSync()
            throw error
        }
        await resumeSync()
    }

    /// Asks the server to mail a reset code to `email`. It answers the same whether or
    /// not an account has that email; the code works once, for 15 minutes.
    public func requestPasswordReset(email: String) async throws {
        try await account.requestPasswordReset(email: email)
    }

    /// Sets a new password for `email`'s account with the code from the mail, and ends
    /// every session of that account. Returns true when this device was signed in to it
    /// and carries on with a new session; false when it holds another account (or an
    /// anonymous one), which stays: then ``signIn(email:password:choice:)`` with the new
    /// password. A wrong, used or expired code throws `invalid_code`.
    @discardableResult
    public func resetPassword(email: String, code: String, newPassword: String) async throws -> Bool {
        await stopStream()
        await engine.stop()
        let renewed: StoredSession?
        do {
            renewed = try await account.resetPassword(email: email, code: code, newPassword: newPassword)
        } catch {
            await resumeSync()
            throw error
        }
        await resumeSync()
        return renewed != nil
    }

    /// Resumes sync, and the stream when sync is automatic, after an account step that
    /// paused them.
    private func resumeSync() async {
        await engine.resume()
        if configuration.syncsAutomatically { await startStream() }
    }

    /// Signs out: stops sync and waits for what is in flight, tells the server (best
    /// effort), then wipes this device's session and local data. The device is signed out
    /// even when the server could not be told or a file could not be deleted (the log
    /// says which); a new `FerryClient` on the folder is a fresh install.
    public func signOut() async {
        await stopStream()
        await engine.stop()
        stopBackgroundTasks()
        await account.signOutOnServer()
        await wipeLocally()
    }

    /// Deletes the account on the server (every row, every session), then wipes the
    /// device as ``signOut()`` does. Throws, and changes nothing locally, when the
    /// server could not be asked.
    public func deleteAccount() async throws {
        await stopStream()
        await engine.stop()
        do {
            try await account.deleteOnServer()
        } catch {
            await engine.resume()
            if configuration.syncsAutomatically { await startStream() }
            throw error
        }
        stopBackgroundTasks()
        await wipeLocally()
    }

    private func wipeLocally() async {
        do { try await account.forget() } catch { configuration.log("sign-out: \(error)") }
        let store = current.withLock { current in
            defer {
                current.store = nil
                current.user = nil
            }
            return current.store
        }
        if let store {
            let tables = Set(store.tables.keys)
            removeStoreFiles(store.path)
            notify(tables)
        }
        statusBroadcast.update { $0 = FerryStatus() }
        eventBroadcast.send(.accountChanged(nil))
    }

    /// The server ended the session. This runs inside whatever request learned it (often
    /// a sync pass), so it must not wait for sync to stop: that pass is waiting for it.
    /// The pass ends on its own (there is no store or session any more).
    private func sessionWasEnded(reason: String) async {
        current.withLock {
            $0.store = nil
            $0.user = nil
        }
        let engine = self.engine
        Task { [weak self] in
            await self?.stopStream()
            await engine.stop()
        }
        stopBackgroundTasks()
        eventBroadcast.send(.sessionEnded(reason: reason))
    }

    private func removeStoreFiles(_ path: String) {
        for file in [path, path + "-wal", path + "-shm"] {
            do { try StateFiles.remove(file) } catch { configuration.log("sign-out: \(error)") }
        }
    }
}

extension SyncEngine {
    func resumeIfSignedIn(_ signedIn: Bool) { if signedIn { resume() } }
}
