import FerryAuth

/// The database requests each device and each user has in flight on this process, from
/// admission (before the pool is asked for a connection) until the database has answered
/// them, bounded so that one device or one user cannot take the connections and the
/// wait queues of the pools, which every user shares; and the push bytes each device may
/// send per second, so that one device pushing without pause cannot take a database
/// core either. Over a bound the answer is `429 rate_limited` with `Retry-After`,
/// without touching the database. Any thread: a device's connections land on any loop,
/// so one instance serves them all.
final class RequestsInFlight: Sendable {
    /// `Retry-After` of a refusal, seconds, and how long the refusal is held before it is
    /// sent (``LoopContext/run(_:as:pushing:answering:_:)``): a request in flight usually ends within
    /// milliseconds, so the shortest wait the header can say.
    static let retryAfterSeconds = 1

    /// A device is counted within its user: device ids are chosen by clients, so another
    /// user's device of the same id must not share (or use up) its count.
    struct Device: Hashable, Sendable {
        var userID: String
        var deviceID: String
    }

    /// Requests in flight per device of a user.
    let perDevice: ConcurrencyLimit<Device>
    /// Requests in flight per user, over all its devices.
    let perUser: ConcurrencyLimit<String>
    /// Push body bytes per device of a user, per one-second window.
    let pushBytes: RateLimiter

    init(perDevice: Int, perUser: Int, pushBytesPerSecond: Int) {
        self.perDevice = ConcurrencyLimit(limit: perDevice)
        self.perUser = ConcurrencyLimit(limit: perUser)
        pushBytes = RateLimiter(limit: pushBytesPerSecond, windowSeconds: 1)
    }

    /// Counts a request of `identity` against its device and its user, and a push of
    /// `pushing` body bytes against its device's budget, or returns the `429` to answer
    /// when any is at its limit (then nothing is counted). An admitted request must be
    /// given back with ``finish(_:)`` exactly once.
    func admit(_ identity: Identity, pushing bytes: Int = 0) -> APIError? {
        let device = Device(userID: identity.userID, deviceID: identity.deviceID)
        guard perDevice.take(device) else {
            return Self.refusal("this device already has \(perDevice.limit) requests in flight")
        }
        guard perUser.take(identity.userID) else {
            perDevice.release(device)
            return Self.refusal("this user already has \(perUser.limit) requests in flight from its devices")
        }
        if bytes > 0,
            case .denied(let seconds) = pushBytes.admit(identity.userID + " " + identity.deviceID, cost: bytes)
        {
            finish(identity)
            return Self.refusal(
                "this device pushed more than \(pushBytes.limit) bytes in the last second", retryAfterSeconds: seconds)
        }
        return nil
    }

    /// Gives back a request counted by ``admit(_:)``, once it is answered or has failed.
    func finish(_ identity: Identity) {
        perDevice.release(Device(userID: identity.userID, deviceID: identity.deviceID))
        perUser.release(identity.userID)
    }

    private static func refusal(_ what: String, retryAfterSeconds: Int = retryAfterSeconds) -> APIError {
        .rateLimited(
            retryAfterSeconds: retryAfterSeconds,
            message: "\(what) on this server; wait for an answer, or retry after \(retryAfterSeconds) s")
    }
}
