import FerryAuth
import FerryLoop
import FerryPostgres
import Foundation

/// The email directory shared by every shard (`--directory-database-url`,
/// docs/SCALING.md "The email directory"), from one loop: its own pool to the directory
/// database, and the claim protocol that keeps an email unique across shards.
///
/// A link (without confirmation; with it, the confirmation) first claims the email as pending for (shard, user)
/// (``claim(_:for:_:)``), then commits the shard's own change, then settles the claim
/// by what the shard answered (``settle(_:linked:confirmed:on:_:)``). A claim left pending (a crash,
/// a lost answer between the steps) is settled by its own shard's reconciliation
/// (``reconcile(shard:olderThanSeconds:on:_:)``), against that shard's database: linked
/// there → linked; else released, unless renewed since. So a crash never lets two users
/// own one email, nor locks one for longer than the bound. Loop thread only.
final class EmailDirectory {
    let pool: PostgresPool
    private let logger: Logger

    init(pool: PostgresPool, logger: Logger) {
        self.pool = pool
        self.logger = logger
    }

    /// A pending claim this request made or renewed.
    struct Claim {
        var email: String
        var shard: Int
        var userID: String
        /// As the directory wrote it: what ``SettleClaim`` compares.
        var claimedAt: String
    }

    enum ClaimOutcome {
        /// Pending for the caller (`nil`: already the caller's, linked, nothing to settle).
        case claimed(Claim?)
        /// `409 email_in_use`, or `503 directory_unavailable`.
        case refused(APIError)
    }

    /// Claims `email` for `caller`'s user, of the shard its id names.
    func claim(_ email: String, for caller: Identity, _ completion: @escaping (ClaimOutcome) -> Void) {
        guard let user = UUID(uuidString: caller.userID) else { return completion(.refused(.unexpected)) }
        let shard = Shard.of(user)
        pool.run(ClaimEmail(email: email, shard: shard, userID: caller.userID)) { [logger] result in
            switch result {
            case .success(.claimed(let claimedAt)):
                completion(.claimed(Claim(email: email, shard: shard, userID: caller.userID, claimedAt: claimedAt)))
            case .success(.linked): completion(.claimed(nil))
            case .success(.inUse): completion(.refused(.emailInUse))
            case .failure(let failure):
                logger.log(.error, "email directory unreachable", ["error": "\(failure)"])
                completion(.refused(.directoryUnavailable))
            }
        }
    }

    /// Settles `claim` once its shard answered: `linked` true marks it linked; false
    /// (the shard linked nothing) asks the shard's database whether the user has the
    /// email anyway (a concurrent retry's link) before releasing it. Best effort: a claim
    /// left pending is reconciliation's.
    /// `confirmed`: the email counts as the user's once confirmed (FERRY_EMAIL_CONFIRMATION=required).
    /// Calls `completion` once settled or left pending (the request answers then).
    func settle(
        _ claim: Claim, linked: Bool, confirmed: Bool, on shardPool: PostgresPool,
        _ completion: @escaping () -> Void
    ) {
        if linked { return settle(claim, found: true, completion) }
        shardPool.run(UserHasEmail(userID: claim.userID, email: claim.email, confirmed: confirmed)) { [self] result in
            guard case .success(let answer) = result else { return completion() }
            settle(claim, found: answer.hasEmail, completion)
        }
    }

    private func settle(_ claim: Claim, found: Bool, _ completion: @escaping () -> Void) {
        let query = SettleClaim(
            email: claim.email, shard: claim.shard, userID: claim.userID, claimedAt: claim.claimedAt, linked: found)
        pool.run(query) { [logger] result in
            if case .failure(let failure) = result {
                logger.log(.warning, "email directory claim left pending", ["error": "\(failure)"])
            }
            completion()
        }
    }

    /// Settles up to ``reconcileBatch`` of `shard`'s claims pending for more than
    /// `olderThanSeconds`, each against `shardPool` (whether the user has the email,
    /// confirmed when `confirmed`); calls back with how many were settled (linked or
    /// released), or nil when the directory or the shard failed.
    func reconcile(
        shard: Int, olderThanSeconds: Int, confirmed: Bool, on shardPool: PostgresPool,
        _ completion: @escaping (Int?) -> Void
    ) {
        let stale = StaleClaims(shard: shard, olderThanSeconds: olderThanSeconds, limit: Self.reconcileBatch)
        pool.run(stale) { [self] result in
            guard case .success(let claims) = result else { return completion(nil) }
            settleEach(claims[...], shard: shard, confirmed: confirmed, on: shardPool, settled: 0, completion)
        }
    }

    /// Claims settled per reconciliation round.
    static let reconcileBatch = 100

    private func settleEach(
        _ claims: ArraySlice<StaleClaims.Claim>, shard: Int, confirmed: Bool, on shardPool: PostgresPool,
        settled: Int, _ completion: @escaping (Int?) -> Void
    ) {
        guard let claim = claims.first else { return completion(settled) }
        shardPool.run(UserHasEmail(userID: claim.userID, email: claim.email, confirmed: confirmed)) { [self] found in
            guard case .success(let answer) = found else { return completion(nil) }
            let query = SettleClaim(
                email: claim.email, shard: shard, userID: claim.userID, claimedAt: claim.claimedAt,
                linked: answer.hasEmail)
            pool.run(query) { [self] outcome in
                guard case .success(let settledClaim) = outcome else { return completion(nil) }
                if settledClaim.outcome != "unchanged" {
                    logger.log(
                        .info, "email directory claim reconciled",
                        ["shard": String(shard), "outcome": settledClaim.outcome])
                }
                settleEach(
                    claims.dropFirst(), shard: shard, confirmed: confirmed, on: shardPool,
                    settled: settled + (settledClaim.outcome == "unchanged" ? 0 : 1), completion)
            }
        }
    }

    /// Before `caller`'s account is deleted: its row of `email` back to pending. False
    /// when the directory did not answer (the deletion then waits: `503`).
    func unlink(_ email: String, of caller: Identity, _ completion: @escaping (Bool) -> Void) {
        guard let user = UUID(uuidString: caller.userID) else { return completion(false) }
        pool.run(UnlinkEmail(email: email, shard: Shard.of(user), userID: caller.userID)) { [logger] result in
            if case .failure(let failure) = result {
                logger.log(.error, "email directory unreachable", ["error": "\(failure)"])
                return completion(false)
            }
            completion(true)
        }
    }

    /// After `caller`'s account was deleted: its row of `email` deleted. Best effort: a
    /// row left pending is released by reconciliation (the user no longer has the email).
    func release(_ email: String, of caller: Identity, _ completion: @escaping () -> Void) {
        guard let user = UUID(uuidString: caller.userID) else { return completion() }
        pool.run(ReleaseEmail(email: email, shard: Shard.of(user), userID: caller.userID)) { [logger] result in
            if case .failure(let failure) = result {
                logger.log(.warning, "email directory row left pending", ["error": "\(failure)"])
            }
            completion()
        }
    }

    /// This gateway's shard number, read once from its database (``ThisShard``).
    private var thisShard: Int?

    /// Where an email's account is.
    enum Location {
        /// On this shard, or nowhere the directory knows (answered here, as before).
        case here
        /// On another shard.
        case shard(Int)
        /// The directory or the shard's database did not answer.
        case unknown
    }

    /// Finds the shard of `email`'s account (``LookUpEmail``).
    func locate(_ email: String, shardPool: PostgresPool, _ completion: @escaping (Location) -> Void) {
        guard let thisShard else {
            return shardPool.run(ThisShard()) { [self] result in
                guard case .success(let this) = result else { return completion(.unknown) }
                thisShard = this.shard
                locate(email, shardPool: shardPool, completion)
            }
        }
        pool.run(LookUpEmail(email: email)) { [logger] result in
            switch result {
            case .success(let shard?) where shard != thisShard: completion(.shard(shard))
            case .success: completion(.here)
            case .failure(let failure):
                logger.log(.error, "email directory unreachable", ["error": "\(failure)"])
                completion(.unknown)
            }
        }
    }

    func close() { pool.close() }
}

extension APIError {
    /// The email directory (`--directory-database-url`) did not answer: nothing was changed.
    static let directoryUnavailable = APIError(
        status: 503, code: "directory_unavailable",
        message: "the email directory is unreachable; nothing was changed, retry")
}
