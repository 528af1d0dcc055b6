import FerryLoad
import FerryLoop
import Foundation

/// One simulated device on its loop: an account, a keep-alive connection for its
/// requests (one at a time, as an app's sync engine sends them), a stream, a local
/// copy built from its own pulls, an outbox. Loop thread only; owned by its ``FleetLoop``.
final class FleetDevice {
    /// `stopping`: no more writes, pulls still merge; `frozen`: nothing more (the check reads the copy).
    enum Phase { case signingUp, loading, running, stopping, frozen, idle, failed }

    let index: Int
    let tag: String
    unowned let owner: FleetLoop
    let http: HTTPClientConnection
    let transport: StreamTransport
    var phase = Phase.signingUp
    var userID = ""
    var token = ""
    var email: String?
    var replica = DeviceReplica(userID: "")
    var outbox: DeviceOutbox
    var holdsLock = false
    var streamOpen = false
    var needsPull = false
    var pullIsFirstLoad = true
    var pushDueAt: UInt64 = .max
    var heartbeatDueAt: UInt64 = .max
    var reconnectDueAt: UInt64 = .max
    var signOutDueAt: UInt64 = .max
    var streamReopenAt: UInt64 = .max
    var droppedAt: UInt64?
    var pendingBatch: [OutboxMutation]?
    var companionOf: FleetDevice?
    var wantsCompanion = false
    var serverIndex: Int
    /// The device's id, the same through sign-outs and sign-ins (its lock and mutation ids stay its own).
    let deviceID = UUID().uuidString.lowercased()

    init(index: Int, owner: FleetLoop, serverIndex: Int, transport: StreamTransport) {
        self.index = index
        self.owner = owner
        self.serverIndex = serverIndex
        self.transport = transport
        tag = "d\(index)"
        outbox = DeviceOutbox(tag: tag, userID: "")
        http = HTTPClientConnection(
            loop: owner.loop, server: owner.servers[serverIndex], source: owner.source(for: index))
    }

    /// A request waits for its retry: nothing else may start on the connection meanwhile.
    var waitingToRetry = false
    /// Retries in a row of the request waiting: the delay doubles with each (a busy hasher answers 503).
    var retries = 0
    /// Whether the device finished its first load once (a later sign-in loads again, but the fleet has started).
    var loadedOnce = false

    var isBusy: Bool { http.isBusy || waitingToRetry }

    // MARK: - Account

    func signUp() {
        let started = MonotonicClock.now()
        let body = "{\"device_id\":\"\(deviceID)\"}"
        request("POST", "/v1/auth/anonymous", body: body, operation: "signup", started: started) { [self] body in
            guard let user = SignedUpUser(signUpAnswer: body) else { return fail("signup answer unreadable") }
            adopt(userID: user.userID, token: user.accessToken)
            wantsCompanion = Double.random(in: 0..<1, using: &owner.random) < owner.mix.linkedShare
            firstLoad()
        }
    }

    /// Signs in with `email` (a companion's first sign-in, or a sign-in after a sign-out).
    func signIn(email: String) {
        self.email = email
        let started = MonotonicClock.now()
        let body =
            "{\"email\":\"\(email)\",\"password\":\"\(FleetLoop.password)\",\"device_id\":\"\(deviceID)\"}"
        request("POST", "/v1/auth/signin", body: body, operation: "signin", started: started) { [self] body in
            guard let user = SignedUpUser(signInAnswer: body) else { return fail("signin answer unreadable") }
            adopt(userID: user.userID, token: user.accessToken)
            firstLoad()
        }
    }

    private func adopt(userID: String, token: String) {
        if userID.lowercased() != self.userID.lowercased() {
            replica.reset(userID: userID)
            outbox.switchUser(to: userID)
        } else {
            replica.reset()
        }
        self.userID = userID.lowercased()
        self.token = token
        pullIsFirstLoad = true
    }

    private func link() {
        let email = "fleet-\(owner.runTag)-\(tag)@example.test"
        let started = MonotonicClock.now()
        let body = "{\"email\":\"\(email)\",\"password\":\"\(FleetLoop.password)\"}"
        let linked = { [self] in
            self.email = email
            owner.addCompanion(of: self, email: email)
        }
        request("POST", "/v1/auth/link", body: body, operation: "link", started: started) { [self] _ in
            linked()
            pump()
        } rejected: { [self] code in
            // The email is this device's own: `already_linked` after a retry means the first
            // attempt linked it and its answer was lost (a gateway going away mid-request).
            if code == "already_linked" { linked() } else { fail("link answered \(code)") }
        }
    }

    private func signOut() {
        guard let email else { return pump() }
        let started = MonotonicClock.now()
        closeStream()
        request("POST", "/v1/auth/signout", operation: "signout", started: started) { [self] _ in
            // The revoked session's token must not go with the sign-in (401 session_revoked).
            token = ""
            signIn(email: email)
        }
    }

    // MARK: - Sync

    private func firstLoad() {
        // A sign-in answered after the fleet stopped loads, but does not start running again.
        if phase != .stopping && phase != .frozen { phase = .loading }
        needsPull = true
        pump()
    }

    private func pull() {
        needsPull = false
        let started = MonotonicClock.now()
        let cursor = replica.cursor.map { "?cursor=\(Self.escape($0))" } ?? ""
        let operation = pullIsFirstLoad ? "first_load" : "pull"
        request("GET", "/v1/pull\(cursor)", operation: operation, started: started) { [self] body in
            do {
                let answer = try PullAnswer(body, tables: owner.tables)
                replica.merge(answer)
                if answer.hasMore {
                    needsPull = true
                    return pump()
                }
            } catch {
                return fail("pull: \(error)")
            }
            pullIsFirstLoad = false
            if let dropped = droppedAt, streamOpen {
                owner.record("stream_recovery", since: dropped)
                droppedAt = nil
            }
            if phase == .loading { startRunning() } else { pump() }
        } rejected: { [self] code in
            if code == "cursor_expired" {
                replica.reset()
                pullIsFirstLoad = true
                needsPull = true
            }
        }
    }

    private func startRunning() {
        phase = .running
        loadedOnce = true
        let now = MonotonicClock.now()
        openStream()
        schedulePush(from: now)
        reconnectDueAt = owner.exponentialDelay(from: now, perHour: owner.mix.reconnectsPerDeviceHour)
        if email != nil {
            signOutDueAt = owner.exponentialDelay(from: now, perHour: owner.mix.signOutsPerDeviceHour)
        }
        if owner.mix.app == "puzzle" && !holdsLock { claimLockSoon() }
        if wantsCompanion {
            wantsCompanion = false
            return link()
        }
        pump()
    }

    private func claimLockSoon() { heartbeatDueAt = MonotonicClock.now() }

    private func schedulePush(from now: UInt64) {
        pushDueAt = owner.exponentialDelay(from: now, perHour: owner.mix.pushesPerDeviceMinute * 60)
    }

    private func push() {
        let batch =
            pendingBatch
            ?? (try? outbox.makePush(
                count: owner.mix.batchSizes.pick(using: &owner.random), operations: owner.mix.operations,
                tables: owner.tables, holdsLock: holdsLock, using: &owner.random))
        guard let batch else { return fail("the outbox could not make a push") }
        pendingBatch = batch
        let started = MonotonicClock.now()
        request("POST", "/v1/push", body: DeviceOutbox.body(batch), operation: "push", started: started) {
            [self] body in
            pendingBatch = nil
            guard let results = Self.pushResults(body) else { return fail("push answer unreadable") }
            outbox.record(batch, results: results.map { ($0.id, $0.status) })
            for result in results where result.status == "rejected" { owner.countError("rejected:\(result.code)") }
            owner.mutations += batch.count
            schedulePush(from: MonotonicClock.now())
            pump()
        } rejected: { [self] _ in
            // A 4xx is final for the whole batch: drop it (a 5xx or lost answer keeps it to retry).
            pendingBatch = nil
            schedulePush(from: MonotonicClock.now())
        }
    }

    private func heartbeat() {
        let path = "/v1/locks/active_game/current/\(holdsLock ? "heartbeat" : "claim")"
        let operation = holdsLock ? "lock_heartbeat" : "lock_claim"
        let started = MonotonicClock.now()
        heartbeatDueAt = started + UInt64(owner.mix.lockHeartbeatSeconds * 1e9)
        request("POST", path, body: holdsLock ? nil : "{\"force\":false}", operation: operation, started: started) {
            [self] _ in
            holdsLock = true
            pump()
        } rejected: { [self] code in
            // lock_held: the user's other device plays; try again after a while. lock_lost: the same.
            if code == "lock_held" || code == "lock_lost" {
                holdsLock = false
                heartbeatDueAt = MonotonicClock.now() + 20_000_000_000
            }
        }
    }

    // MARK: - Stream

    private func openStream() {
        guard !streamOpen else { return }
        owner.openStream(for: self)
    }

    /// The stream's hello arrived: pull once (cues sent while away are not replayed).
    func streamOpened() {
        streamOpen = true
        needsPull = true
        pump()
    }

    func cued() {
        needsPull = true
        pump()
    }

    func streamEnded() {
        let wasOpen = streamOpen
        streamOpen = false
        guard phase == .running else { return }
        if wasOpen && droppedAt == nil { droppedAt = MonotonicClock.now() }
        // Reconnect after a random jitter, to the next gateway if there are several.
        serverIndex = (serverIndex + 1) % owner.servers.count
        streamReopenAt = MonotonicClock.now() + owner.jitter()
    }

    private func closeStream() {
        owner.closeStream(for: self)
        streamOpen = false
    }

    // MARK: - Scheduling

    /// Runs whatever is due, one request at a time: pulls first, then the lock, then the outbox.
    func pump(now: UInt64 = MonotonicClock.now()) {
        guard !isBusy, phase == .loading || phase == .running || phase == .stopping else { return }
        if needsPull { return pull() }
        guard phase == .running else { return }
        if streamReopenAt <= now && !streamOpen {
            streamReopenAt = .max
            http.server = owner.servers[serverIndex]
            openStream()
        }
        if heartbeatDueAt <= now { return heartbeat() }
        if pendingBatch != nil || pushDueAt <= now { return push() }
        if reconnectDueAt <= now {
            reconnectDueAt = owner.exponentialDelay(from: now, perHour: owner.mix.reconnectsPerDeviceHour)
            if streamOpen {
                closeStream()
                droppedAt = now
                streamReopenAt = now + owner.jitter()
            }
        }
        if signOutDueAt <= now {
            signOutDueAt = owner.exponentialDelay(from: now, perHour: owner.mix.signOutsPerDeviceHour)
            return signOut()
        }
    }

    /// Stops writing; the final pull comes from ``finalPull()``.
    func stop() {
        if phase == .running || phase == .loading { phase = .stopping }
        pushDueAt = .max
        heartbeatDueAt = .max
        reconnectDueAt = .max
        signOutDueAt = .max
    }

    /// Ends all activity: cues no longer pull (the check is about to read the copy).
    func freeze() {
        if phase == .stopping { phase = .frozen }
    }

    func finalPull() {
        guard phase == .stopping else { return }
        needsPull = true
        pump()
    }

    // MARK: - Requests

    private func request(
        _ method: String, _ path: String, body: String? = nil, operation: String, started: UInt64,
        _ answered: @escaping ([UInt8]) -> Void, rejected: ((String) -> Void)? = nil
    ) {
        http.send(method, path, token: token.isEmpty ? nil : token, body: body) { [self] outcome in
            switch outcome {
            case .failed(let reason):
                owner.countError("transport:\(reason)")
                retryLater(method, path, body: body, operation: operation, answered, rejected: rejected)
            case .answered(let status, let bytes) where (200..<300).contains(status):
                retries = 0
                owner.record(operation, since: started)
                answered(bytes)
            case .answered(let status, let bytes):
                let code = Self.errorCode(bytes) ?? "status_\(status)"
                owner.countError("\(operation):\(code)")
                if outcome.isRetryable {
                    retryLater(method, path, body: body, operation: operation, answered, rejected: rejected)
                } else if let rejected {
                    retries = 0
                    rejected(code)
                    pump()
                } else {
                    fail("\(operation) answered \(status) \(code)")
                }
            }
        }
    }

    private func retryLater(
        _ method: String, _ path: String, body: String?, operation: String,
        _ answered: @escaping ([UInt8]) -> Void, rejected: ((String) -> Void)?
    ) {
        // A gateway went away: the next request goes to the next one, after a jitter.
        serverIndex = (serverIndex + 1) % owner.servers.count
        http.server = owner.servers[serverIndex]
        waitingToRetry = true
        retries += 1
        let delay = HTTPClientOutcome.retryDelay(retries: retries, jitterMilliseconds: owner.jitter() / 1_000_000 / 4)
        owner.loop.schedule(after: delay) { [self] in
            waitingToRetry = false
            guard phase != .failed, phase != .idle else { return }
            request(
                method, path, body: body, operation: operation, started: MonotonicClock.now(), answered,
                rejected: rejected)
        }
    }

    func fail(_ reason: String) {
        owner.countError("device:\(reason.prefix(80))")
        phase = .failed
        closeStream()
        owner.deviceFailed(self, reason)
    }

    // MARK: - Answers

    static func errorCode(_ body: [UInt8]) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let error = object["error"] as? [String: Any]
        else { return nil }
        return error["code"] as? String
    }

    static func pushResults(_ body: [UInt8]) -> [(id: Int64, status: String, code: String)]? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let results = object["results"] as? [[String: Any]]
        else { return nil }
        return results.compactMap { result in
            guard let id = (result["id"] as? NSNumber)?.int64Value, let status = result["status"] as? String else {
                return nil
            }
            return (id, status, result["code"] as? String ?? "")
        }
    }

    static func escape(_ cursor: String) -> String {
        cursor.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~")))
            ?? cursor
    }
}

extension SignedUpUser {
    /// Reads the `200` answer of `POST /v1/auth/signin`: the same `user` and `session` as a sign-up's.
    init?(signInAnswer body: some Collection<UInt8>) { self.init(signUpAnswer: body) }
}
