import Foundation

/// The device's account: its session, kept in a ``SessionStore``, refreshed before it
/// expires, and every request that needs a Bearer token.
///
/// A refresh is one at a time in the process (one task shared by every caller) and
/// across processes (`flock` on the state folder's `.refresh.lock`; the winner stores the
/// new tokens before it lets go, and a waiter re-reads them instead of sending a refresh
/// token twice, which would revoke the session). Every change of account (sign-in,
/// sign-out, link, deletion, a session the server ended) moves `generation`, and a
/// refresh that started under an older generation drops its answer: it neither stores
/// tokens nor ends the next user's session.
actor Account {
    /// What the state folder says about the account at launch.
    enum Launch: Sendable {
        case present(StoredSession)
        case fresh
        case unreadable(String)
    }

    let api: GatewayAPI
    let sessionStore: any SessionStore
    let directory: String
    private let log: @Sendable (String) -> Void
    private(set) var session: StoredSession?
    private(set) var generation: UInt64 = 0
    private var refreshing: Task<StoredSession, any Error>?
    /// Called (outside the actor's own work) when the server ended the session.
    private var sessionEnded: (@Sendable (String) async -> Void)?

    init(api: GatewayAPI, sessionStore: any SessionStore, directory: String, log: @escaping @Sendable (String) -> Void)
    {
        self.api = api
        self.sessionStore = sessionStore
        self.directory = directory
        self.log = log
    }

    var markerPath: String { directory + "/account.json" }
    var refreshLockPath: String { directory + "/.refresh.lock" }

    func onSessionEnded(_ handler: @escaping @Sendable (String) async -> Void) { sessionEnded = handler }

    /// Reads the session and the marker. Only "the store is sure it holds nothing, and
    /// no marker says there was an account" is a fresh install.
    func launch() -> Launch {
        let marker = StateFiles.read(markerPath)
        switch sessionStore.load() {
        case .present(let stored):
            session = stored
            return .present(stored)
        case .unreadable(let reason):
            return .unreadable(reason)
        case .absent:
            switch marker {
            case .absent: return .fresh
            case .present: return .unreadable("the session store is empty, but this folder had an account")
            case .unreadable(let reason): return .unreadable(reason)
            }
        }
    }

    // MARK: - Sessions from answers

    /// The session in an answer `{"user", "session"}` (sign-up, refresh, sign-in).
    static func session(from answer: GatewayAnswer, deviceID: String) throws(FerryError) -> StoredSession {
        session(from: try answer.decode(SessionAnswer.self, "a session answer"), deviceID: deviceID)
    }

    static func session(from answer: SessionAnswer, deviceID: String) -> StoredSession {
        let claims = Self.claims(of: answer.session.accessToken)
        let now = Date()
        let expiresIn = answer.session.expiresIn.map(Double.init) ?? 3600
        let expiresAt = claims?.exp.map { Date(timeIntervalSince1970: Double($0)) } ?? now.addingTimeInterval(expiresIn)
        let issuedAt = claims?.iat.map { Date(timeIntervalSince1970: Double($0)) } ?? now
        return StoredSession(
            accessToken: answer.session.accessToken, refreshToken: answer.session.refreshToken, expiresAt: expiresAt,
            issuedAt: issuedAt, userID: answer.user.id, sessionID: claims?.sid ?? "", deviceID: claims?.did ?? deviceID,
            isAnonymous: answer.user.isAnonymous ?? true, email: answer.user.email,
            emailConfirmed: answer.user.emailConfirmed)
    }

    /// The claims of a JWT, read without checking its signature (the server does that).
    static func claims(of token: String) -> TokenClaims? {
        let parts = token.split(separator: ".")
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64), let json = try? JSONValue(json: data) else { return nil }
        return try? WireDecoder.decode(TokenClaims.self, from: json)
    }

    /// Makes `new` the session: stored (then the marker) before anyone uses it.
    func adopt(_ new: StoredSession) throws(FerryError) {
        do { try sessionStore.save(new) } catch { throw .storage("cannot store the session: \(error)") }
        do {
            try StateFiles.write(try FileSessionStore.encoder.encode(AccountMarker(new)), to: markerPath, mode: 0o600)
        } catch {
            throw .storage("cannot write \(markerPath): \(error)")
        }
        if session?.sessionID != new.sessionID || session?.userID != new.userID { generation &+= 1 }
        session = new
    }

    /// Forgets the session: the store's item and the marker go, and `generation` moves,
    /// so answers to requests of the old session are dropped.
    func forget() throws(FerryError) {
        generation &+= 1
        refreshing?.cancel()
        refreshing = nil
        session = nil
        do { try sessionStore.remove() } catch { throw .storage("cannot remove the session: \(error)") }
        try StateFiles.remove(markerPath)
    }

    // MARK: - Sign-up and tokens

    /// `POST /v1/auth/anonymous` with a new device id: the first launch.
    func signUpAnonymously() async throws(FerryError) -> StoredSession {
        let deviceID = UUID().uuidString.lowercased()
        let answer = try await api.send("POST", "/v1/auth/anonymous", body: ["device_id": .string(deviceID)])
        guard answer.status == 201 || answer.status == 200 else { throw .server(answer.error) }
        let new = try Self.session(from: answer, deviceID: deviceID)
        try adopt(new)
        return new
    }

    /// The access token, refreshed first when it expires within a minute (or `forceRefresh`).
    func accessToken(forceRefresh: Bool = false) async throws(FerryError) -> String {
        guard let current = session else { throw .signedOut }
        if !forceRefresh && current.expiresAt.timeIntervalSinceNow > 60 { return current.accessToken }
        return try await refresh(from: current).accessToken
    }

    /// When the session should be refreshed: a tenth of its lifetime (at least a minute)
    /// before it expires, but never before half of it has passed, so a gateway that issues
    /// short tokens (its minimum is a minute) is not asked for a refresh the moment one
    /// arrives, again and again.
    var refreshDue: Date? {
        session.map { Self.refreshDue(issuedAt: $0.issuedAt, expiresAt: $0.expiresAt) }
    }

    /// ``refreshDue`` of a token issued at `issuedAt` that expires at `expiresAt`.
    static func refreshDue(issuedAt: Date, expiresAt: Date) -> Date {
        let lifetime = max(expiresAt.timeIntervalSince(issuedAt), 0)
        return expiresAt.addingTimeInterval(-min(max(60, lifetime / 10), lifetime / 2))
    }

    /// Refreshes `stale` (one refresh at a time in the process).
    func refresh(from stale: StoredSession) async throws(FerryError) -> StoredSession {
        if let refreshing {
            do { return try await refreshing.value } catch { throw (error as? FerryError) ?? .unreachable("\(error)") }
        }
        let task = Task { try await self.refreshAcrossProcesses(from: stale, generation: generation) }
        refreshing = task
        defer { if refreshing == task { refreshing = nil } }
        do { return try await task.value } catch { throw (error as? FerryError) ?? .unreachable("\(error)") }
    }

    private func refreshAcrossProcesses(from stale: StoredSession, generation started: UInt64) async throws(FerryError)
        -> StoredSession
    {
        guard let lock = await FileLock.acquire(refreshLockPath, timeout: api.timeout + 10) else {
            throw .unreachable("another process holds the refresh lock")
        }
        defer { lock.release() }
        // Another process may have refreshed (or signed out) while this one waited.
        switch sessionStore.load() {
        case .present(let stored) where stored.sessionID == stale.sessionID:
            if stored.refreshToken != stale.refreshToken {
                guard generation == started else { throw .signedOut }
                session = stored
                return stored
            }
        case .present, .absent:
            guard generation == started else { throw .signedOut }
            try? forget()
            throw .signedOut
        case .unreadable(let reason):
            throw .sessionUnreadable(reason)
        }
        let answer = try await sendRefresh(stale.refreshToken)
        // A refresh that outlived its session (signed out, signed in meanwhile) is dropped.
        guard generation == started, session?.sessionID == stale.sessionID else { throw .signedOut }
        // Only a 200 carries tokens to store; anything else leaves the stored session as it was.
        guard answer.status == 200 else {
            let error = answer.error
            if answer.status == 401 && ["session_revoked", "refresh_token_reused", "unauthorized"].contains(error.code)
            {
                await end(reason: error.code)
            }
            throw .server(error)
        }
        var new = try Self.session(from: answer, deviceID: stale.deviceID)
        if new.email == nil { new.email = stale.email }
        try adopt(new)
        return new
    }

    /// Attempts at one refresh, and the most each may take: the server may have rotated the
    /// token of an attempt whose answer was lost, and answers the same token again only
    /// within its grace window (30 s by default), so every retry is sent well inside it.
    static let refreshAttempts = 3
    static let refreshDeadline: TimeInterval = 8
    private static let refreshRetry = RetryPolicy(base: 0.5, cap: 1)

    /// `POST /v1/auth/refresh` with `token`, sent again (the same token: PROTOCOL.md's grace
    /// window) after no answer, a reset, a `5xx` or a `429` whose wait is short, up to
    /// ``refreshAttempts`` times. The last answer, or the last failure to get one.
    private func sendRefresh(_ token: String) async throws(FerryError) -> GatewayAnswer {
        var failures = 0
        while true {
            let answer: GatewayAnswer
            do {
                answer = try await api.send(
                    "POST", "/v1/auth/refresh", body: ["refresh_token": .string(token)], deadline: Self.refreshDeadline)
            } catch {
                failures += 1
                guard error.isRetryable, failures < Self.refreshAttempts else { throw error }
                log("a refresh got no answer (\(error)); sending it again")
                try? await Task.sleep(for: .seconds(Self.refreshRetry.delay(afterFailures: failures - 1)))
                continue
            }
            let retryable = answer.status != 200 && answer.error.retryable
            failures += 1
            guard retryable, failures < Self.refreshAttempts, answer.retryAfter ?? 0 <= 2 else { return answer }
            try? await Task.sleep(
                for: .seconds(Self.refreshRetry.delay(afterFailures: failures - 1, retryAfter: answer.retryAfter)))
        }
    }

    /// The server ended the session (revoked, reused, the account deleted): forget it,
    /// keep the local data file where it is (under the old user's name), and tell the client.
    func end(reason: String) async {
        guard session != nil else { return }
        log("the server ended the session (\(reason)); this device is signed out")
        if let stored = session, let data = try? FileSessionStore.encoder.encode(AccountMarker(stored)) {
            try? StateFiles.write(data, to: directory + "/ended-\(stored.userID).json", mode: 0o600)
        }
        try? forget()
        if let sessionEnded { await sessionEnded(reason) }
    }

    // MARK: - Requests

    /// Sends a request with the Bearer token. An answer `401 token_expired` (or
    /// `unauthorized`) refreshes the token once and sends the request once more;
    /// `401 session_revoked` ends the session.
    func authorized(
        _ method: String, _ path: String, query: [(String, String)] = [], body: JSONValue? = nil
    ) async throws(FerryError) -> GatewayAnswer {
        let token = try await accessToken()
        let started = generation
        var answer = try await api.send(method, path, query: query, body: body, token: token)
        if answer.status == 401 && ["token_expired", "unauthorized"].contains(answer.error.code) {
            guard generation == started, let current = session else { throw .signedOut }
            let fresh =
                current.accessToken == token ? try await refresh(from: current).accessToken : current.accessToken
            answer = try await api.send(method, path, query: query, body: body, token: fresh)
        }
        guard generation == started else { throw .signedOut }
        if answer.status == 401 && answer.error.code == "session_revoked" {
            await end(reason: "session_revoked")
            throw .signedOut
        }
        return answer
    }

    // MARK: - Link, sign-in, sign-out, deletion

    /// `POST /v1/auth/link`: this anonymous account gets an email and a password. A
    /// retry after the server linked it (`409 already_linked`) learns the outcome from
    /// `GET /v1/auth/user`.
    func link(email: String, password: String) async throws(FerryError) -> StoredSession {
        let answer = try await authorized(
            "POST", "/v1/auth/link", body: ["email": .string(email), "password": .string(password)])
        let linkedUser = try? answer.decode(UserAnswer.self, "a link answer").user
        var linked = linkedUser?.email ?? email
        var confirmed = linkedUser?.emailConfirmed
        if answer.status == 409 && answer.error.code == "already_linked" {
            // A link the server committed whose answer was lost (a crash, a dropped
            // connection): ask who this session is now, and adopt it when it is this email.
            let user = try await authorized("GET", "/v1/auth/user")
            guard user.status == 200, let now = try? user.decode(UserAnswer.self, "a user answer").user,
                now.isAnonymous == false, let address = now.email, address.lowercased() == email.lowercased()
            else { throw .server(answer.error) }
            linked = address
            confirmed = now.emailConfirmed
        } else if answer.status != 200 {
            throw .server(answer.error)
        }
        guard var updated = session else { throw .signedOut }
        updated.isAnonymous = false
        updated.email = linked
        updated.emailConfirmed = confirmed
        try adopt(updated)
        return updated
    }

    /// `POST /v1/auth/confirm`: confirms this account's email with the mailed code. When
    /// another account confirmed the email first (`409 email_in_use`), the server undid
    /// this account's link: it is anonymous again here too, and the error is thrown.
    func confirmEmail(code: String) async throws(FerryError) -> StoredSession {
        let answer = try await authorized("POST", "/v1/auth/confirm", body: ["code": .string(code)])
        guard var updated = session else { throw .signedOut }
        if answer.status == 409 && answer.error.code == "email_in_use" {
            updated.isAnonymous = true
            updated.email = nil
            updated.emailConfirmed = nil
            try adopt(updated)
            throw .server(answer.error)
        }
        guard answer.status == 200 else { throw .server(answer.error) }
        let user = try answer.decode(UserAnswer.self, "a confirm answer").user
        updated.email = user.email ?? updated.email
        updated.emailConfirmed = user.emailConfirmed ?? true
        try adopt(updated)
        return updated
    }

    /// `POST /v1/auth/confirm/resend`: mails a new confirmation code, replacing the last.
    func resendConfirmation() async throws(FerryError) {
        let answer = try await authorized("POST", "/v1/auth/confirm/resend")
        guard answer.status == 202 || answer.status == 200 else { throw .server(answer.error) }
    }

    /// `POST /v1/auth/signin` with this device's session as Bearer (without one when the
    /// session is over: a retry after a sign-in whose answer was lost); returns the new
    /// session and whether the server reset the device's data (`keep_cloud`).
    func signIn(email: String, password: String, resolve: SignInChoice?) async throws(FerryError)
        -> (session: StoredSession, reset: Bool)
    {
        guard let current = session else { throw .signedOut }
        var body: FerryRow = [
            "email": .string(email), "password": .string(password), "device_id": .string(current.deviceID),
        ]
        if let resolve { body["resolve"] = .string(resolve.rawValue) }
        let token = try? await accessToken()
        var answer = try await api.send("POST", "/v1/auth/signin", body: .object(body), token: token)
        if token != nil && answer.status == 401 && answer.error.code != "invalid_credentials" {
            // This device's session is over: most likely a sign-in the server committed
            // (ending the anonymous session) whose answer was lost. Sign-in needs no
            // Bearer: sent without one, it signs this device in.
            answer = try await api.send("POST", "/v1/auth/signin", body: .object(body))
        }
        guard answer.status == 200 else {
            let error = answer.error
            if error.code == "resolution_required" {
                let fields = answer.errorFields
                throw .resolutionRequired(deviceRows: fields?.deviceRows ?? 0, cloudRows: fields?.cloudRows ?? 0)
            }
            throw .server(error)
        }
        let signedIn = try answer.decode(SessionAnswer.self, "a sign-in answer")
        let new = Self.session(from: signedIn, deviceID: current.deviceID)
        try adopt(new)
        return (new, signedIn.reset ?? false)
    }

    /// `POST /v1/auth/signout`, best effort (a bounded wait; the local sign-out does not
    /// depend on it).
    func signOutOnServer() async {
        guard let token = session?.accessToken else { return }
        _ = try? await api.send("POST", "/v1/auth/signout", token: token)
    }

    /// `DELETE /v1/account` (safe to retry: a retry after a lost answer is `204` again).
    func deleteOnServer() async throws(FerryError) {
        let answer = try await authorized("DELETE", "/v1/account", body: ["confirm": "DELETE"])
        guard answer.status == 204 || answer.status == 200 else { throw .server(answer.error) }
    }
}

/// The answer to the sign-in question "keep this device's data, or the account's?".
public enum SignInChoice: String, Sendable, Hashable, Codable {
    /// Keep the account's data: this device's anonymous rows are deleted, and the device
    /// loads the account afresh.
    case keepCloud = "keep_cloud"
    /// Keep this device's data: the account's rows are deleted and this device's rows
    /// move into the account.
    case keepDevice = "keep_device"
}
