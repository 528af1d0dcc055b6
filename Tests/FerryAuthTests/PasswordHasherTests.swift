import FerryLoop
import FerryTestSupport
import Foundation
import Synchronization
import Testing

@testable import FerryAuth

/// Argon2id hashing on the worker threads, answered on the caller's loop.
@Suite(.tagSelection) struct PasswordHasherTests {
    /// What a completion saw: its result and whether it ran on the loop.
    struct Delivery<Value: Sendable>: Sendable {
        let result: Result<Value, PasswordHasherError>
        let onLoop: Bool
    }

    /// Calls `start` and waits (at most 30 s) for the completion it is given.
    func deliver<Value: Sendable>(
        on loop: EventLoop,
        _ start: (@escaping @Sendable (Result<Value, PasswordHasherError>) -> Void) -> Void
    ) async throws -> Delivery<Value> {
        let stream = AsyncStream<Delivery<Value>> { continuation in
            start { result in
                continuation.yield(Delivery(result: result, onLoop: loop.inEventLoop))
                continuation.finish()
            }
        }
        return try await withThrowingTaskGroup(of: Delivery<Value>?.self) { group in
            group.addTask { await stream.first { _ in true } }
            group.addTask {
                try await Task.sleep(for: .seconds(30))
                return nil
            }
            defer { group.cancelAll() }
            guard let delivery = try await group.next() ?? nil else {
                throw CancellationError()
            }
            return delivery
        }
    }

    @Test func hashVerifiesAndAWrongPasswordDoesNot() async throws {
        let loop = EventLoop.spawn(name: "password-test")
        defer { loop.stop() }
        let hasher = PasswordHasher()
        defer { hasher.close() }

        let hashed = try await deliver(on: loop) { hasher.hash("correct horse", on: loop, completion: $0) }
        #expect(hashed.onLoop)
        let hash = try hashed.result.get()
        #expect(hash.hasPrefix("$argon2id$"))

        let right = try await deliver(on: loop) {
            hasher.verify("correct horse", against: hash, on: loop, completion: $0)
        }
        #expect(right.onLoop)
        #expect(right.result == .success(true))
        let wrong = try await deliver(on: loop) {
            hasher.verify("battery staple", against: hash, on: loop, completion: $0)
        }
        #expect(wrong.onLoop)
        #expect(wrong.result == .success(false))
    }

    @Test func unparsableStoredHashDoesNotVerify() async throws {
        let loop = EventLoop.spawn(name: "password-test")
        defer { loop.stop() }
        let hasher = PasswordHasher()
        defer { hasher.close() }
        let result = try await deliver(on: loop) {
            hasher.verify("password", against: "$2b$10$xyz", on: loop, completion: $0)
        }
        #expect(result.result == .success(false))
    }

    @Test func unknownAccountVerificationAnswersFalseOnTheLoop() async throws {
        let loop = EventLoop.spawn(name: "password-test")
        defer { loop.stop() }
        let hasher = PasswordHasher()
        defer { hasher.close() }
        let result = try await deliver(on: loop) {
            hasher.verifyForUnknownAccount("any password", on: loop, completion: $0)
        }
        #expect(result.onLoop)
        #expect(result.result == .success(false))
    }

    @Test func fullQueueFailsFastWithBusyOnTheLoop() async throws {
        let loop = EventLoop.spawn(name: "password-test")
        defer { loop.stop() }
        let hasher = PasswordHasher(threads: 1, queueLimit: 1)
        defer { hasher.close() }
        // Hold the only thread, then fill the one queue slot (after the start-up job drains).
        let started = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        defer { release.signal() }
        let deadline = Date().addingTimeInterval(30)
        while !hasher.workers.submit({
            started.signal()
            release.wait()
        }) {
            #expect(Date() < deadline, "the start-up job never left the queue")
            if Date() >= deadline { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(started.wait(timeout: .now() + 30) == .success)
        let queued = hasher.workers.submit {}
        #expect(queued)

        let refused = try await deliver(on: loop) { hasher.hash("correct horse", on: loop, completion: $0) }
        #expect(refused.onLoop)
        #expect(refused.result == .failure(.busy))
    }

    @Test func closedHasherAnswersBusy() async throws {
        let loop = EventLoop.spawn(name: "password-test")
        defer { loop.stop() }
        let hasher = PasswordHasher(threads: 1, queueLimit: 4)
        hasher.close()
        let refused = try await deliver(on: loop) { hasher.verifyForUnknownAccount("x", on: loop, completion: $0) }
        #expect(refused.result == .failure(.busy))
    }
}
