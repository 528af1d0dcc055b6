import FerryPostgres

// The device locks of sql/ferry/functions/locks.sql, run as the caller. Each function
// answers a small `{"status", …}` object, read into columns by the statement itself.

/// `ferry.claim_lock`: takes a row's lock for the caller's device (or takes it over).
struct ClaimLock: SingleRowQuery {
    static let preparedName: String? = "ferry_claim_lock"
    static let sql = LockAnswer.select(from: "ferry.claim_lock($1, $2, $3::boolean)")
    static let columns = LockAnswer.columns

    var table: String
    var key: String
    /// Takes the lock from another device that holds it.
    var force: Bool
    var parameters: [String?] { [table, key, force ? "true" : "false"] }

    typealias Answer = LockAnswer
}

/// `ferry.heartbeat_lock`: says the caller's device still holds the lock.
struct HeartbeatLock: SingleRowQuery {
    static let preparedName: String? = "ferry_heartbeat_lock"
    static let sql = LockAnswer.select(from: "ferry.heartbeat_lock($1, $2)")
    static let columns = LockAnswer.columns

    var table: String
    var key: String
    var parameters: [String?] { [table, key] }

    typealias Answer = LockAnswer
}

/// `ferry.release_lock`: gives the lock up.
struct ReleaseLock: SingleRowQuery {
    static let preparedName: String? = "ferry_release_lock"
    static let sql = LockAnswer.select(from: "ferry.release_lock($1, $2)")
    static let columns = LockAnswer.columns

    var table: String
    var key: String
    var parameters: [String?] { [table, key] }

    typealias Answer = LockAnswer
}

/// What a lock function answers: its status and the fields that status has.
struct LockAnswer: QueryRowDecodable {
    /// `ok`, `lock_held`, `lock_lost`, `not_found` or `invalid`.
    var status: String
    /// The device that holds the lock (claim and heartbeat when `ok`, `lock_held`, `lock_lost`).
    var holder: String?
    /// When the holder's last heartbeat was, as ISO 8601 text (`ok` with a holder).
    var heartbeatAt: String?
    /// How long ago that was (`lock_held`).
    var heartbeatAgeMilliseconds: Int?
    /// Why, for `not_found` and `invalid`.
    var message: String?
    /// Whether the call queued a cue (a claim or a release that wrote) for the gateway to
    /// send after the commit (``QueuedCueSender``).
    var cuesQueued: Bool

    static let columns = ["status", "holder", "heartbeat_at", "heartbeat_age_ms", "message", "cues_queued"]

    /// The statement that reads `call`'s answer into ``columns``.
    static func select(from call: String) -> String {
        """
        select a ->> 'status' as status, a ->> 'holder' as holder, a ->> 'heartbeat_at' as heartbeat_at,
            (a ->> 'heartbeat_age_ms')::bigint as heartbeat_age_ms, a ->> 'message' as message,
            \(Push.cuesQueuedColumn)
        from \(call) a
        """
    }

    init(_ row: QueryRow) throws(QueryShapeError) {
        status = try row.decode("status")
        holder = try row.decodeIfPresent("holder")
        heartbeatAt = try row.decodeIfPresent("heartbeat_at")
        heartbeatAgeMilliseconds = try row.decodeIfPresent("heartbeat_age_ms")
        message = try row.decodeIfPresent("message")
        cuesQueued = try row.decodeIfPresent("cues_queued") ?? false
    }
}
