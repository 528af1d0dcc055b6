import Foundation

/// The lifecycle of one stream (PROTOCOL.md "Streams"), apart from any I/O: `hello`
/// when it opens, a heartbeat every `heartbeat_ms`, one `token_expiring` before its
/// token's end, and each way it ends: the token's end (`4001`), a revoked session or a
/// deleted account (`4003`, `4004`), a client that takes nothing (`4008`), a bad in-band
/// `auth` (`1008`), shutdown (`1001`). A stream is closed once, for the first reason.
///
/// A plain value, like FerryPostgres's `ListenerStateMachine`: each `mutating func`
/// takes what happened (and when, as an ``Instant``) and returns the ``Action`` the
/// driver (``CueHub``) performs. The driver reads the clocks and the socket's unsent
/// bytes and passes them in, so tests choose them and need no socket.
///
/// Deadlines: the machine names the next moment it must be asked again
/// (``Action/send(_:thenWakeAt:)``); the driver calls ``deadlineReached(now:unsentBytes:)``
/// then. It is due at the next heartbeat, at the token warning (while not yet warned),
/// and at the token's end.
///
/// Stalls: a stream with bytes waiting at two heartbeats in a row that took none in
/// between (``drained()``) reads nothing, or its client is gone: `4008`. So is a
/// WebSocket whose previous ping went unanswered (``heartbeatUnanswered()``), and one
/// whose unsent bytes pass ``StreamPolicy/maxUnsentBytes`` after a cue
/// (``cueSent(unsentBytes:)``).
struct StreamLifecycle {
    /// A moment, on both of the driver's clocks.
    struct Instant: Equatable {
        /// The loop's monotonic milliseconds (`uv_now`): heartbeats and deadlines.
        var loopMilliseconds: UInt64
        /// Milliseconds since 1970: the token's end, which its claims give in wall seconds.
        var wallMilliseconds: Int
    }

    /// Where the stream is.
    enum State: Equatable {
        /// Open: messages go out.
        case open
        /// The machine asked for the close; the transport has not reported it done.
        case closing(StreamCloseReason)
        /// The transport reported the stream gone (``closed()``).
        case closed
    }

    /// A message the driver writes on the stream.
    enum Message: Equatable {
        /// `{"type":"hello","user_id","device_id","heartbeat_ms"}`.
        case hello(heartbeatMilliseconds: Int)
        /// `{"type":"token_expiring","in_ms"}`.
        case tokenExpiring(inMilliseconds: Int)
        /// The transport's heartbeat: a WebSocket ping, an SSE `: ping` comment. When
        /// the transport says the previous ping went unanswered, the driver stops and
        /// reports ``heartbeatUnanswered()`` instead of going on.
        case heartbeat
    }

    /// What the driver must do next.
    enum Action: Equatable {
        /// Nothing.
        case none
        /// Write `messages` in order, then ask again at `deadline` (loop milliseconds).
        case send(_ messages: [Message], thenWakeAt: UInt64)
        /// Write `messages` in order, then close the stream for `reason`.
        case sendAndClose(_ messages: [Message], StreamCloseReason)
        /// Close the stream for the reason given.
        case close(StreamCloseReason)
    }

    let policy: StreamPolicy
    let userID: UUID
    /// The session of the stream's current token (the in-band `auth` may change it).
    private(set) var sessionID: UUID
    /// The first second (since 1970) its token is refused (``AccessTokenSigner/acceptedUntil(_:)``).
    private(set) var expiresAt: Int
    private(set) var state = State.open
    /// Whether `token_expiring` went out for the current token.
    private(set) var hasWarned = false
    /// When the next heartbeat is due (loop milliseconds); set when the stream opens.
    private(set) var nextHeartbeat: UInt64 = 0
    private var stalledAtLastHeartbeat = false
    private var drainedSinceHeartbeat = false

    init(policy: StreamPolicy, userID: UUID, sessionID: UUID, expiresAt: Int) {
        self.policy = policy
        self.userID = userID
        self.sessionID = sessionID
        self.expiresAt = expiresAt
    }

    /// Whether messages may still go out: the machine has not asked for a close, nor
    /// has the transport reported one.
    var isOpen: Bool { state == .open }

    // MARK: - Events

    /// The stream is open: `hello`, then whatever its token's end asks for already.
    mutating func opened(now: Instant) -> Action {
        precondition(state == .open, "a stream opens once")
        nextHeartbeat = now.loopMilliseconds + UInt64(policy.heartbeatMilliseconds)
        return deadlines(now: now, unsentBytes: 0, first: [.hello(heartbeatMilliseconds: policy.heartbeatMilliseconds)])
    }

    /// The deadline the machine asked for has come (or passed): the token's end, its
    /// warning, a heartbeat. `unsentBytes`: what the stream's socket has not taken yet.
    mutating func deadlineReached(now: Instant, unsentBytes: Int) -> Action {
        guard isOpen else { return .none }
        return deadlines(now: now, unsentBytes: unsentBytes, first: [])
    }

    /// The transport said the previous ping was never answered: the client is gone.
    mutating func heartbeatUnanswered() -> Action {
        close(.tooSlow)
    }

    /// The socket took everything that waited.
    mutating func drained() {
        drainedSinceHeartbeat = true
    }

    /// A cue went out, leaving `unsentBytes` in the socket: over the policy's bound,
    /// the client is too slow for its cues.
    mutating func cueSent(unsentBytes: Int) -> Action {
        unsentBytes > policy.maxUnsentBytes ? close(.tooSlow) : .none
    }

    /// The in-band `auth` brought a valid token of the stream's user and device: the
    /// stream lives on to its end (`expiresAt`) and is warned again before it.
    mutating func tokenRenewed(sessionID: UUID, expiresAt: Int, now: Instant, unsentBytes: Int) -> Action {
        guard isOpen else { return .none }
        self.sessionID = sessionID
        self.expiresAt = expiresAt
        hasWarned = false
        return deadlines(now: now, unsentBytes: unsentBytes, first: [])
    }

    /// A session was revoked: an account's deletion (with its user) ends every stream
    /// of the user, `4004`; otherwise the streams of that session close, `4003`.
    mutating func revoked(_ revocation: Revocation) -> Action {
        let deleted = revocation.reason == .accountDeleted
        if let user = revocation.userID {
            guard user == userID, deleted || revocation.sessionID == sessionID else { return .none }
        } else {
            guard revocation.sessionID == sessionID else { return .none }
        }
        return close(deleted ? .accountDeleted : .sessionRevoked)
    }

    /// The gateway is shutting down: `1001`.
    mutating func shutdown() -> Action {
        close(.goingAway)
    }

    /// Closes the stream for `reason`, unless a close was asked for already.
    mutating func close(_ reason: StreamCloseReason) -> Action {
        guard isOpen else { return .none }
        state = .closing(reason)
        return .close(reason)
    }

    /// The transport reports the stream gone (either side closed it).
    mutating func closed() {
        state = .closed
    }

    // MARK: - Internals

    /// What is due now, after `first`: the close at the token's end, else its warning
    /// and the heartbeat, and the next deadline.
    private mutating func deadlines(now: Instant, unsentBytes: Int, first: [Message]) -> Action {
        var messages = first
        // Saturating: the end is a client's token's, bounded by the token check but checked here too.
        let expiresInMilliseconds = expiresAt.saturatingMultiply(1000).saturatingAdd(-now.wallMilliseconds)
        if expiresInMilliseconds <= 0 { return closing(after: messages, .tokenExpired) }
        let warningMilliseconds = policy.tokenWarningSeconds * 1000
        if !hasWarned && expiresInMilliseconds <= warningMilliseconds {
            hasWarned = true
            messages.append(.tokenExpiring(inMilliseconds: expiresInMilliseconds))
        }
        let loopNow = now.loopMilliseconds
        if loopNow >= nextHeartbeat {
            nextHeartbeat = loopNow + UInt64(policy.heartbeatMilliseconds)
            let stalled = unsentBytes > 0
            // Bytes waiting at two heartbeats in a row, nothing taken in between: the
            // client reads nothing (or is gone).
            if stalled && stalledAtLastHeartbeat && !drainedSinceHeartbeat {
                return closing(after: messages, .tooSlow)
            }
            stalledAtLastHeartbeat = stalled
            drainedSinceHeartbeat = false
            // A stalled stream is left to the rule above: a ping would only queue behind its bytes.
            if !stalled { messages.append(.heartbeat) }
        }
        var deadline = min(nextHeartbeat, loopNow + UInt64(expiresInMilliseconds))
        if !hasWarned {
            deadline = min(deadline, loopNow + UInt64(expiresInMilliseconds - warningMilliseconds))
        }
        return .send(messages, thenWakeAt: deadline)
    }

    private mutating func closing(after messages: [Message], _ reason: StreamCloseReason) -> Action {
        state = .closing(reason)
        return messages.isEmpty ? .close(reason) : .sendAndClose(messages, reason)
    }
}
