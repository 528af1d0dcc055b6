import Foundation

/// What can go wrong in a FerryClient call. ``isRetryable`` says which failures the same
/// call may get past later, unchanged.
public enum FerryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The server could not be reached (no network, refused, timed out, a lost answer).
    /// Nothing is lost: queued work stays queued and is retried.
    case unreachable(String)
    /// The server answered with an error.
    case server(ServerError)
    /// There is no session: the device signed out, or the server ended the session.
    case signedOut
    /// The stored session could not be read (a locked Keychain, an unreadable file).
    /// Nothing was discarded; try again later.
    case sessionUnreadable(String)
    /// Signing in needs the app's choice: this device's anonymous data, or the account's.
    case resolutionRequired(deviceRows: Int, cloudRows: Int)
    /// Another device holds the lock: the takeover prompt's data.
    case lockHeld(holder: String?, heartbeatAge: TimeInterval?)
    /// The lock was taken by another device (or released) since this one claimed it.
    case lockLost(holder: String?)
    /// The outbox could not be emptied before linking or signing in: some mutations
    /// are still pending (the server could not take them yet).
    case outboxNotEmpty(pending: Int)
    /// The local store refused (an unknown table, a missing key, a read-only table).
    case local(LocalStoreError)
    /// The server's answer did not follow the protocol.
    case invalidAnswer(String)
    /// A local file could not be written or read.
    case storage(String)

    /// A description for logs and for people.
    public var description: String {
        switch self {
        case .unreachable(let reason): "the server could not be reached: \(reason)"
        case .server(let error): error.description
        case .signedOut: "signed out"
        case .sessionUnreadable(let reason): "the stored session could not be read: \(reason)"
        case .resolutionRequired(let device, let cloud):
            "sign-in needs a choice: \(device) rows on this device, \(cloud) in the account"
        case .lockHeld(let holder, let age):
            "the lock is held by device \(holder ?? "?")"
                + (age.map { String(format: " (heartbeat %.1f s ago)", $0) } ?? "")
        case .lockLost(let holder): "the lock was lost" + (holder.map { " to device \($0)" } ?? "")
        case .outboxNotEmpty(let pending): "\(pending) mutations are still waiting to be pushed"
        case .local(let error): error.description
        case .invalidAnswer(let reason): "the server's answer did not follow the protocol: \(reason)"
        case .storage(let reason): reason
        }
    }

    /// The server's error code, when the server answered with one.
    public var serverCode: String? { if case .server(let error) = self { error.code } else { nil } }

    /// Whether the same work may succeed later without any change: the server could not
    /// be reached, or it answered 5xx or 429.
    public var isRetryable: Bool {
        switch self {
        case .unreachable: true
        case .server(let error): error.retryable
        default: false
        }
    }
}
