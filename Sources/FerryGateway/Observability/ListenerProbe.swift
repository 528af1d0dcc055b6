import FerryLoop
import FerryPostgres

/// Whether the listener actually receives: a `NOTIFY` on a channel of this process's own
/// (``channel``), sent through a request pool, must come back through the listener within
/// ``timeoutMilliseconds``. Listener's loop only.
///
/// A `LISTEN` through a pooler in transaction mode is accepted and then receives nothing:
/// the server session that listens is handed to other clients once the statement is done.
/// A connected listener proves nothing, so `ferry serve` refuses to start without one
/// round trip, and `/readyz` asks for one. So that haproxy's health checks (every 2 s by
/// default, per gateway and per haproxy) cost no more than one `NOTIFY` per
/// ``freshMilliseconds``, an outcome is kept that long and probes asked for meanwhile
/// share the one in flight.
final class ListenerProbe {
    /// What a probe found.
    enum Outcome: Equatable, Sendable {
        /// The notification came back.
        case received
        /// It was sent and did not come back in time.
        case notReceived
        /// It could not be sent (the request database failed).
        case notSent(String)

        /// What `/readyz` tells anyone when the probe failed: no libpq text.
        var publicMessage: String {
            switch self {
            case .received: "ready"
            case .notReceived: "listener receives no notifications"
            case .notSent: "database is not reachable"
            }
        }
    }

    /// The private channel, one per process: no other gateway sends on it.
    let channel: String
    /// How long a sent notification may take to come back.
    static let timeoutMilliseconds: UInt64 = 2_000
    /// How long an outcome answers later probes.
    static let freshMilliseconds: UInt64 = 1_000

    private let loop: EventLoop
    private let pool: PostgresPool
    private var waiting: [(Outcome) -> Void] = []
    /// The payload of the probe in flight.
    private var expected: String?
    private var deadline: Timer?
    private var sequence: UInt64 = 0
    private var last: (outcome: Outcome, at: UInt64)?

    /// A probe on `channel` (``newChannel()``, which the listener listens to) that sends
    /// through `pool`, on the listener's loop.
    init(loop: EventLoop, pool: PostgresPool, channel: String) {
        self.loop = loop
        self.pool = pool
        self.channel = channel
    }

    /// A channel name no other process uses.
    static func newChannel() -> String {
        "ferry_probe_" + String(UInt64.random(in: .min ... .max), radix: 16)
    }

    /// Calls `completion` on the loop with a fresh outcome, or a recent one.
    func check(_ completion: @escaping (Outcome) -> Void) {
        loop.preconditionInEventLoop()
        if let last, loop.now - last.at < Self.freshMilliseconds { return completion(last.outcome) }
        waiting.append(completion)
        guard expected == nil else { return }
        sequence += 1
        let payload = String(sequence)
        expected = payload
        deadline = loop.schedule(after: Self.timeoutMilliseconds) { [weak self] in
            self?.finish(payload, .notReceived)
        }
        pool.run(NotifyListenerProbe(channel: channel, payload: payload)) { [weak self] result in
            if case .failure(let failure) = result { self?.finish(payload, .notSent(failure.description)) }
        }
    }

    /// The listener received `payload` on ``channel``.
    func received(_ payload: String) {
        loop.preconditionInEventLoop()
        finish(payload, .received)
    }

    /// Forgets a kept outcome: the listener reconnected, and what it found before says
    /// nothing of the new connection.
    func forget() {
        last = nil
    }

    /// What the log says of an outcome other than ``Outcome/received``, with what to do.
    static func advice(_ outcome: Outcome) -> String {
        switch outcome {
        case .received:
            return "the listener received the NOTIFY it sent itself"
        case .notReceived:
            return "the listener (FERRY_LISTEN_DATABASE_URL, --listen-database-url, which defaults to "
                + "FERRY_DATABASE_URL) received no NOTIFY it sent itself within \(timeoutMilliseconds) ms: LISTEN "
                + "needs a direct connection to the primary, and through a pooler in transaction mode (pgbouncer) "
                + "it receives nothing. Point FERRY_LISTEN_DATABASE_URL at PostgreSQL itself "
                + "(docs/OPERATIONS.md, \"Through pgbouncer\")"
        case .notSent(let description):
            return "the listener's probe could not be sent through FERRY_DATABASE_URL: \(description)"
        }
    }

    private func finish(_ payload: String, _ outcome: Outcome) {
        guard payload == expected else { return }
        expected = nil
        deadline?.close()
        deadline = nil
        last = (outcome, loop.now)
        let completions = waiting
        waiting = []
        for completion in completions { completion(outcome) }
    }
}
