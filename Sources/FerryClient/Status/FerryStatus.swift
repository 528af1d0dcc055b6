import Foundation
import Synchronization

/// Where sync stands: one value, replaced (never mutated in place) at every change.
public struct FerryStatus: Sendable, Equatable {
    /// Whether the last request reached the server (a stream, when one runs, counts too).
    public var connected = false
    /// Whether a push is in flight.
    public var uploading = false
    /// Whether a pull is in flight.
    public var downloading = false
    /// Mutations waiting in the outbox.
    public var pendingMutations = 0
    /// When a pull last reached the end of what changed (nil before the first load).
    public var lastSyncedAt: Date?
    /// The last failure of sync (nil once a sync succeeds again).
    public var lastError: FerryError?

    /// A status before any sync: nothing pending, never synced, not connected.
    public init() {}
}

/// Something the app should know about, loudly.
public enum FerryEvent: Sendable, Equatable {
    /// The server rejected a mutation for good: it is dropped, and its row is back to the
    /// server's version (with the row's other pending writes on top).
    case mutationRejected(RejectedMutation)
    /// Another device took (or this one lost) a lock this device held.
    case lockLost(table: String, key: String)
    /// The server ended the session (`session_revoked`, `refresh_token_reused`,
    /// `account_deleted`): this device is signed out; its local data file was kept.
    case sessionEnded(reason: String)
    /// A token refresh failed; it is retried after `retryIn` seconds.
    case refreshFailed(error: FerryError, retryIn: TimeInterval)
    /// A push or pull failed with a retryable error; it is retried after `retryIn` seconds
    /// (or at the next reconnect, whichever comes first).
    case syncFailed(error: FerryError, retryIn: TimeInterval)
    /// The account changed: signed up, linked, signed in, signed out (`nil`), deleted (`nil`).
    case accountChanged(FerryUser?)
    /// A pull reached the end of what changed; it merged changes into these tables
    /// (none: nothing had changed).
    case pulled(tables: Set<String>)
}

/// A mutation the server refused: which, and why.
public struct RejectedMutation: Sendable, Hashable {
    /// The device's mutation number.
    public var id: Int64
    /// The table it wrote to.
    public var table: String
    /// What it did.
    public var op: FerryOperation
    /// The row (or key, for a delete) that was sent.
    public var row: FerryRow
    /// The rejection code (`constraint_violation`, `lock_not_held`, …) and message.
    public var code: String
    /// The server's human text for the rejection.
    public var message: String
}

/// Who this device is signed in as.
public struct FerryUser: Sendable, Hashable, Codable {
    /// The user id (the owner column's value in every row of theirs).
    public var id: String
    /// This device's id (the token's `did`).
    public var deviceID: String
    /// Whether the account has no email yet (``FerryClient/link(email:password:)`` gives it one).
    public var isAnonymous: Bool
    /// The account's email, once linked.
    public var email: String?
    /// Whether the server has the email confirmed: false until
    /// ``FerryClient/confirmEmail(code:)`` on a server that requires confirmation (the
    /// email cannot sign in until then); false for an anonymous account.
    public var isEmailConfirmed: Bool
}

/// A value many can follow: each `updates()` stream gets the current value first, then
/// every change. Consumers that fall behind see the newest values (a bounded buffer).
final class Broadcast<Value: Sendable>: Sendable {
    private struct State {
        var value: Value
        var subscribers: [UUID: AsyncStream<Value>.Continuation] = [:]
    }
    private let state: Mutex<State>
    private let replays: Bool

    init(_ value: Value, replaysCurrent: Bool) {
        state = Mutex(State(value: value))
        replays = replaysCurrent
    }

    var value: Value { state.withLock { $0.value } }

    /// Replaces the value with `change` applied, and tells every subscriber.
    func update(_ change: (inout Value) -> Void) {
        let (value, subscribers) = state.withLock { state in
            change(&state.value)
            return (state.value, Array(state.subscribers.values))
        }
        for subscriber in subscribers { subscriber.yield(value) }
    }

    /// Sends `value` to every subscriber (an event: nothing is kept).
    func send(_ value: Value) { update { $0 = value } }

    func updates() -> AsyncStream<Value> {
        let (stream, continuation) = AsyncStream.makeStream(of: Value.self, bufferingPolicy: .bufferingNewest(64))
        let id = UUID()
        let current = state.withLock { state in
            state.subscribers[id] = continuation
            return state.value
        }
        if replays { continuation.yield(current) }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { _ = $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    func finish() {
        let subscribers = state.withLock { state in
            defer { state.subscribers.removeAll() }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.finish() }
    }
}
