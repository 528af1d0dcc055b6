import FerryLoad
import FerryLoop
import FerryPostgres
import Foundation

/// A bare libpq connection that `LISTEN`s on `ferry_cue` and notes when each
/// notification arrives: the floor Ferry's cue latency is compared with. Loop thread
/// only; unchecked-Sendable so tasks for its loop can carry it.
final class CueFloor: @unchecked Sendable {
    let loop: EventLoop
    /// `(owner field of the payload: a user id or "*", monotonic ns)` per notification.
    private(set) var notifications: [(owner: Substring, at: UInt64)] = []
    private var connection: PostgresConnection?

    private init(loop: EventLoop) { self.loop = loop }

    /// Connects and listens; throws when either fails.
    static func start(_ configuration: PostgresConfiguration) throws -> CueFloor {
        let floor = CueFloor(loop: EventLoop.spawn(name: "floor"))
        let result = floor.loop.waitForCallback { (done: @escaping (Result<Void, PostgresError>) -> Void) in
            PostgresConnection.connect(on: floor.loop, configuration: configuration) { result in
                switch result {
                case .failure(let error): done(.failure(error))
                case .success(let connection):
                    floor.connection = connection
                    connection.onNotification = { notification in
                        let now = MonotonicClock.now()
                        let owner = notification.payload.split(separator: " ", maxSplits: 1).first ?? ""
                        floor.notifications.append((owner, now))
                    }
                    connection.execute("LISTEN ferry_cue") { done($0.map { _ in () }) }
                }
            }
        }!
        if case .failure(let error) = result { throw LoadError("LISTEN connection: \(error)") }
        return floor
    }

    /// The notifications so far.
    func received() -> [(owner: Substring, at: UInt64)] { loop.runAndWait { self.notifications } }

    func stop() {
        loop.runAndWait { self.connection?.close() }
        loop.stop()
        loop.waitUntilStopped()
    }
}

/// The writer: one libpq connection on its own loop committing one statement at a time.
/// Loop thread only; unchecked-Sendable so tasks for its loop can carry it.
final class Writer: @unchecked Sendable {
    let loop: EventLoop
    private var connection: PostgresConnection?

    private init(loop: EventLoop) { self.loop = loop }

    static func start(_ configuration: PostgresConfiguration) throws -> Writer {
        let writer = Writer(loop: EventLoop.spawn(name: "writer"))
        let result = writer.loop.waitForCallback { (done: @escaping (Result<Void, PostgresError>) -> Void) in
            PostgresConnection.connect(on: writer.loop, configuration: configuration) { result in
                done(
                    result.map { connection in
                        writer.connection = connection
                        return ()
                    })
            }
        }!
        if case .failure(let error) = result { throw LoadError("writer connection: \(error)") }
        return writer
    }

    /// The process id of the writer's backend (its CPU is the writes', not the pulls').
    var backendPID: Int32 { loop.runAndWait { self.connection!.backendPID } }

    /// Runs one statement now; returns when it was sent and when its answer came (monotonic ns).
    func commit(_ sql: String, _ parameters: [String?] = []) throws -> (sent: UInt64, answered: UInt64) {
        let result = loop.waitForCallback { (done: @escaping (Result<(UInt64, UInt64), PostgresError>) -> Void) in
            let sent = MonotonicClock.now()
            self.connection!.query(sql, parameters) { result in
                done(result.map { _ in (sent, MonotonicClock.now()) })
            }
        }!
        return try result.mapError { LoadError("\(sql): \($0)") }.get()
    }

    /// What ``run(sql:rate:seconds:users:quietMilliseconds:)`` did.
    struct Run {
        /// One per statement sent: the user written for, when sent.
        var writes: [CueLatency.Event] = []
        /// Send → answer, milliseconds, per statement.
        var roundTrips: [Double] = []
        /// Statements that failed, and the first error.
        var errors = 0
        var firstError: String?
        /// Statements sent more than 2 ms after their turn (the previous one was still running).
        var late = 0
    }

    /// Commits `sql` (parameter `$1`: the user's id) at `rate` statements a
    /// second for `seconds`, each for a random user among `users` that was not written
    /// in the last `quietMilliseconds` (so each cue can be matched to its write).
    /// Paced by a 1 ms timer; a statement waits when the previous one has not answered.
    func run(sql: String, rate: Double, seconds: Double, users: [String], quietMilliseconds: UInt64) -> Run {
        loop.waitForCallback { (done: @escaping (Run) -> Void) in
            var run = Run()
            var lastWrite = [UInt64](repeating: 0, count: users.count)
            let quiet = quietMilliseconds * 1_000_000
            let start = MonotonicClock.now()
            let total = Int(rate * seconds)
            var sent = 0
            var answered = 0
            var inFlight = false
            var timer: FerryLoop.Timer?
            func pickUser(at now: UInt64) -> Int {
                for _ in 0..<64 {
                    let user = Int.random(in: 0..<users.count)
                    if lastWrite[user] == 0 || now - lastWrite[user] >= quiet { return user }
                }
                return Int.random(in: 0..<users.count)
            }
            func sendDue() {
                let now = MonotonicClock.now()
                let due = min(total, Int(Double(now - start) / 1e9 * rate) + 1)
                guard sent < due, !inFlight else { return }
                if now - start > UInt64(Double(sent) / rate * 1e9) + 2_000_000 { run.late += 1 }
                let user = pickUser(at: now)
                lastWrite[user] = now
                sent += 1
                inFlight = true
                let sentAt = MonotonicClock.now()
                run.writes.append(CueLatency.Event(user: user, at: sentAt))
                self.connection!.query(sql, [users[user]]) { result in
                    run.roundTrips.append(Double(MonotonicClock.now() - sentAt) / 1e6)
                    if case .failure(let error) = result {
                        run.errors += 1
                        if run.firstError == nil { run.firstError = "\(error)" }
                    }
                    inFlight = false
                    answered += 1
                    if answered == total {
                        timer?.close()
                        done(run)
                    } else {
                        sendDue()
                    }
                }
            }
            let pacer = FerryLoop.Timer(loop: self.loop)
            timer = pacer
            pacer.start(after: 1, repeat: 1) { sendDue() }
            if total == 0 {
                pacer.close()
                done(run)
            }
        }!
    }

    func stop() {
        loop.runAndWait { self.connection?.close() }
        loop.stop()
        loop.waitUntilStopped()
    }
}
