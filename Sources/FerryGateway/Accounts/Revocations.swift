import FerryAuth
import FerryPostgres
import Foundation

/// A session revoked by sign-out, token reuse or account deletion (`ferry_revoked`).
struct Revocation: Sendable {
    /// Why: the `reason` of the notification (`ferry.announce_revocation`'s callers,
    /// sql/ferry/functions/accounts.sql).
    enum Reason: String, Sendable {
        case signedOut = "signed_out"
        case tokenReused = "token_reused"
        case accountDeleted = "account_deleted"
    }

    var sessionID: UUID
    var userID: UUID?
    /// Nil for a reason this version does not know.
    var reason: Reason?
}

extension Accounts {
    /// Refuses `sessionID`'s tokens in this process from now on, for as long as any of
    /// them could still be accepted (sign-out and a reused refresh token, at once; other
    /// gateways learn of it by ``noteRevocation(payload:)``).
    func refuseSession(_ sessionID: UUID) {
        revoked.revoke(sessionID, until: tokens.lastAcceptedSecond(issuedAt: Int(Date().timeIntervalSince1970)))
    }

    /// Forgets sessions revoked by any gateway: called with each `ferry_revoked`
    /// notification's payload. Returns the revocation, for closing the session's streams.
    @discardableResult
    func noteRevocation(payload: String) -> Revocation? {
        guard let data = payload.data(using: .utf8),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let text = object["session"] as? String, let session = UUID(uuidString: text)
        else {
            logger.log(.warning, "unreadable revocation notification", ["payload": payload])
            return nil
        }
        refuseSession(session)
        return Revocation(
            sessionID: session, userID: (object["user"] as? String).flatMap(UUID.init(uuidString:)),
            reason: (object["reason"] as? String).flatMap(Revocation.Reason.init(rawValue:)))
    }

    /// Replaces the revoked-session cache with every revocation young enough to matter
    /// (a token of the session may still be accepted): what was announced while nobody
    /// listened (the listener reconnected) is not lost.
    func reloadRevocations(on pool: PostgresPool) {
        pool.run(RecentRevocations(seconds: tokens.acceptanceSeconds)) { [self] result in
            switch result {
            case .success(let recent):
                revoked.replaceAll(
                    with: recent.map {
                        (sessionID: $0.sessionID, until: tokens.lastAcceptedSecond(issuedAt: $0.revokedAt))
                    })
            case .failure(let failure):
                logger.log(.warning, "could not reload revoked sessions", ["error": "\(failure)"])
            }
        }
    }
}
