import FerryPostgres
import Foundation

// Waiting for a condition instead of sleeping: a test that sleeps and then asserts
// passes without the race it names whenever the machine is slower than the sleep
// (the request not read yet, the second transaction not waiting yet), and fails
// whenever it is slower still. These poll, bounded in time and count, and say what
// never happened.

/// Polls `condition` every 25 ms for at most `seconds` (20 unless given); throws a
/// ``ConditionTimeout`` naming `what` if it never holds.
public func eventually(
    _ what: String, seconds: Double = 20, _ condition: () async throws -> Bool
) async throws {
    guard try await eventuallyHolds(seconds: seconds, condition) else {
        throw ConditionTimeout(description: "\(what): not within \(seconds) s")
    }
}

/// Polls `condition` every 25 ms for at most `seconds` (20 unless given); returns
/// whether it came to hold, for a test that then asserts on what it last saw.
public func eventuallyHolds(seconds: Double = 20, _ condition: () async throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    for _ in 0..<Int(seconds * 40) + 1 where ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(25))
    }
    return try await condition()
}

/// Polls `value` every 25 ms for at most `seconds` (20 unless given) until it is not
/// nil, and returns it; throws a ``ConditionTimeout`` naming `what` if it stays nil.
public func eventually<Value>(
    _ what: String, seconds: Double = 20, _ value: () async throws -> Value?
) async throws -> Value {
    var found: Value?
    try await eventually(what, seconds: seconds) {
        found = try await value()
        return found != nil
    }
    return found!
}

/// ``eventually(_:seconds:_:)`` for synchronous tests: blocks the calling thread,
/// polling every 5 ms.
public func eventuallyBlocking(_ what: String, seconds: Double = 20, _ condition: () throws -> Bool) throws {
    guard try eventuallyHoldsBlocking(seconds: seconds, condition) else {
        throw ConditionTimeout(description: "\(what): not within \(seconds) s")
    }
}

/// ``eventuallyHolds(seconds:_:)`` for synchronous code: blocks the calling thread,
/// polling every 5 ms.
public func eventuallyHoldsBlocking(seconds: Double = 20, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    for _ in 0..<Int(seconds * 200) + 1 where ContinuousClock.now < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.005)
    }
    return try condition()
}

/// A condition a test waited for did not come about in time.
public struct ConditionTimeout: Error, CustomStringConvertible {
    public var description: String
}

extension PostgresClient {
    /// Waits (at most `seconds`) until `count` backends of this client's database wait
    /// for a lock that backend `pid` holds: a race forced, not hoped for.
    public func waitForBackends(blockedBy pid: Int32, count: Int = 1, seconds: Double = 20) async throws {
        try await eventually("\(count) backend(s) waiting on a lock of backend \(pid)", seconds: seconds) {
            let waiting = try await query(
                """
                select count(*) from pg_catalog.pg_stat_activity
                where datname = current_database() and $1::int = any (pg_catalog.pg_blocking_pids(pid))
                """, [String(pid)])[0, 0]
            return (Int(waiting ?? "") ?? 0) >= count
        }
    }

    /// Waits (at most `seconds`) until backend `pid` is running a statement whose text
    /// contains `text`: the statement reached the server and has not finished.
    public func waitForBackend(_ pid: Int32, running text: String, seconds: Double = 20) async throws {
        try await eventually("backend \(pid) running \(text)", seconds: seconds) {
            try await query(
                """
                select from pg_catalog.pg_stat_activity
                where pid = $1::int and state = 'active' and position($2 in query) > 0
                """, [String(pid), text]
            ).count == 1
        }
    }
}
