import Foundation

/// A lock this device holds on a `device_lock` row.
public struct LockClaim: Sendable, Hashable {
    /// The table and the key (the value of its non-owner key column, e.g. `current`).
    public var table: String
    /// The key (the value of the table's non-owner key column).
    public var key: String
    /// The holder (this device) and the server's time of its last heartbeat.
    public var holder: String
    /// The server's time of the holder's last heartbeat (RFC 3339).
    public var heartbeatAt: String
}

extension FerryClient {
    /// Claims the lock on `table`'s row `key` (e.g. `active_game`, `current`) for this
    /// device, then keeps it with a heartbeat every ``Configuration/lockHeartbeatInterval``
    /// seconds until ``releaseLock(table:key:)`` (or until it is lost:
    /// ``FerryEvent/lockLost(table:key:)``).
    ///
    /// When another device holds it, throws ``FerryError/lockHeld(holder:heartbeatAge:)``,
    /// the takeover prompt's data ("You're playing on your iPad. Continue here?"); claim
    /// again with `force: true` to take it.
    @discardableResult
    public func claimLock(table: String, key: String, force: Bool = false) async throws -> LockClaim {
        let answer = try await account.authorized(
            "POST", Self.lockPath(table, key, "claim"), body: ["force": .bool(force)])
        guard answer.status == 200 else {
            let error = answer.error
            if error.code == "lock_held" {
                let fields = answer.errorFields
                throw FerryError.lockHeld(
                    holder: fields?.holder, heartbeatAge: fields?.heartbeatAgeMilliseconds.map { Double($0) / 1000 })
            }
            throw FerryError.server(error)
        }
        let claimed = try answer.decode(LockClaimAnswer.self, "a lock claim's answer")
        let claim = LockClaim(table: table, key: key, holder: claimed.holder, heartbeatAt: claimed.heartbeatAt)
        if configuration.syncsAutomatically { startHeartbeat(table: table, key: key) }
        return claim
    }

    /// Renews the lock now. Throws ``FerryError/lockLost(holder:)`` (and sends
    /// ``FerryEvent/lockLost(table:key:)``) when another device took it or it was released.
    public func heartbeatLock(table: String, key: String) async throws {
        let answer = try await account.authorized("POST", Self.lockPath(table, key, "heartbeat"))
        guard answer.status == 200 else {
            let error = answer.error
            if error.code == "lock_lost" {
                stopHeartbeat(table: table, key: key)
                eventBroadcast.send(.lockLost(table: table, key: key))
                throw FerryError.lockLost(holder: answer.errorFields?.holder)
            }
            throw FerryError.server(error)
        }
    }

    /// Stops the heartbeat and releases the lock (a release of a lock this device does
    /// not hold changes nothing).
    public func releaseLock(table: String, key: String) async throws {
        stopHeartbeat(table: table, key: key)
        let answer = try await account.authorized("POST", Self.lockPath(table, key, "release"))
        guard answer.status == 204 || answer.status == 200 else { throw FerryError.server(answer.error) }
    }

    static func lockPath(_ table: String, _ key: String, _ action: String) -> String {
        "/v1/locks/\(GatewayAPI.percentEncoded(table))/\(GatewayAPI.percentEncoded(key))/\(action)"
    }

    private func startHeartbeat(table: String, key: String) {
        let interval = configuration.lockHeartbeatInterval
        let log = configuration.log
        let task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(interval))
                guard !Task.isCancelled, let self else { return }
                do {
                    try await self.heartbeatLock(table: table, key: key)
                } catch FerryError.lockLost {
                    return
                } catch {
                    // A missed heartbeat is not a lost lock: the next one may get through
                    // before the stale limit.
                    log("lock heartbeat for \(table)/\(key) failed: \(error)")
                }
            }
        }
        let previous = heartbeats.withLock { $0.updateValue(task, forKey: table + "/" + key) }
        previous?.cancel()
    }

    private func stopHeartbeat(table: String, key: String) {
        heartbeats.withLock { $0.removeValue(forKey: table + "/" + key) }?.cancel()
    }
}
