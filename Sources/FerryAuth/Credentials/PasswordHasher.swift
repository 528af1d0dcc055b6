import CSodium
import FerryLoop
import Synchronization

/// Why a password could not be hashed or checked.
public enum PasswordHasherError: Error, Sendable, Equatable {
    /// Every worker is busy and the queue is full, or the hasher is closed: answer
    /// `503 unavailable` (retryable) rather than wait.
    case busy
    /// libsodium could not hash (it could not allocate the memory): `500 internal`.
    case failed
}

/// Argon2id password hashes (`crypto_pwhash_str`), computed off the event loops.
///
/// One per process. Hashing or verifying costs ~70 ms of CPU and 64 MiB at the
/// interactive limits, so it runs on a ``BlockingWorkerPool`` of its own (2
/// threads, so at most 128 MiB, and 32 waiting jobs, about 1.1 s of work, by
/// default); when that queue is full the request fails at once with
/// ``PasswordHasherError/busy``. Every completion runs on the `loop` passed in,
/// through ``EventLoop/execute(_:)``, never synchronously inside the call, busy
/// or not. Methods are safe from any thread.
public final class PasswordHasher: Sendable {
    /// Argon2id's time and memory cost.
    public struct Cost: Sendable, Equatable {
        /// Passes over memory (`opslimit`).
        public var operations: UInt64
        /// Bytes of memory (`memlimit`).
        public var memoryBytes: Int

        /// libsodium's interactive limits: 2 passes over 64 MiB.
        public static let interactive = Cost(
            operations: UInt64(crypto_pwhash_opslimit_interactive()),
            memoryBytes: Int(crypto_pwhash_memlimit_interactive()))

        /// A cost from its parts.
        public init(operations: UInt64, memoryBytes: Int) {
            self.operations = operations
            self.memoryBytes = memoryBytes
        }
    }

    /// The cost of new hashes (a stored hash carries its own cost for verifying).
    public let cost: Cost
    let workers: BlockingWorkerPool
    private let computed = Atomic<Int>(0)
    /// A hash of a random password at ``cost``: what an unknown account is checked against.
    private let unknownAccountHash = Mutex<String?>(nil)

    /// Starts `threads` worker threads with room for `queueLimit` waiting jobs, and
    /// computes the unknown-account hash on one of them.
    public init(cost: Cost = .interactive, threads: Int = 2, queueLimit: Int = 32) {
        precondition(Sodium.isReady)
        self.cost = cost
        self.workers = BlockingWorkerPool(name: "password", threads: threads, queueLimit: max(queueLimit, 1))
        _ = workers.submit { [self] in _ = hashForUnknownAccount() }
    }

    /// Hashes computed for requests so far (``hash(_:on:completion:)``, ``verify(_:against:on:completion:)``
    /// and ``verifyForUnknownAccount(_:on:completion:)``; not the unknown-account hash
    /// itself): what a limit on password checks is tested by.
    public var hashesComputed: Int {
        computed.load(ordering: .relaxed)
    }

    /// Refuses new work; queued jobs still complete. Call at shutdown.
    public func close() {
        workers.close()
    }

    /// Hashes `password` (the PHC string `$argon2id$v=19$m=…`, ≤ 128 bytes) and
    /// completes on `loop`. Check ``PasswordPolicy`` first: it bounds the length.
    public func hash(
        _ password: String, on loop: EventLoop,
        completion: @escaping @Sendable (Result<String, PasswordHasherError>) -> Void
    ) {
        run(on: loop, completion: completion) { [cost] in
            Self.hash(password, cost: cost).map { .success($0) } ?? .failure(.failed)
        }
    }

    /// Checks `password` against a stored `hash` and completes on `loop` with whether
    /// it matches (false for a hash that does not parse).
    public func verify(
        _ password: String, against hash: String, on loop: EventLoop,
        completion: @escaping @Sendable (Result<Bool, PasswordHasherError>) -> Void
    ) {
        run(on: loop, completion: completion) { .success(Self.verify(password, against: hash)) }
    }

    /// Spends the time of a real ``verify(_:against:on:completion:)`` for a sign-in
    /// whose email has no account, then completes with `false`, so that "no such
    /// email" and "wrong password" take as long and answer the same
    /// (`401 invalid_credentials`).
    public func verifyForUnknownAccount(
        _ password: String, on loop: EventLoop,
        completion: @escaping @Sendable (Result<Bool, PasswordHasherError>) -> Void
    ) {
        run(on: loop, completion: completion) { [self] in
            guard let hash = hashForUnknownAccount() else { return .failure(.failed) }
            _ = Self.verify(password, against: hash)
            return .success(false)
        }
    }

    private func run<Success: Sendable>(
        on loop: EventLoop, completion: @escaping @Sendable (Result<Success, PasswordHasherError>) -> Void,
        _ work: @escaping @Sendable () -> Result<Success, PasswordHasherError>
    ) {
        let accepted = workers.submit { [self] in
            computed.add(1, ordering: .relaxed)
            let result = work()
            loop.execute { completion(result) }
        }
        if !accepted { loop.execute { completion(.failure(.busy)) } }
    }

    // MARK: - On a worker thread

    /// The unknown-account hash, computed here if the one queued at start has not run
    /// yet; nil only when libsodium cannot allocate the memory.
    private func hashForUnknownAccount() -> String? {
        if let hash = unknownAccountHash.withLock({ $0 }) { return hash }
        var random: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &random) { Sodium.randomBytes($0) }
        guard let hash = Self.hash(Base64URL.encode(withUnsafeBytes(of: random) { Array($0) }), cost: cost) else {
            return nil
        }
        return unknownAccountHash.withLock { stored in
            if stored == nil { stored = hash }
            return stored!
        }
    }

    private static func hash(_ password: String, cost: Cost) -> String? {
        var output = [CChar](repeating: 0, count: Int(crypto_pwhash_STRBYTES))
        let status = password.utf8CString.withUnsafeBufferPointer { password in
            crypto_pwhash_str(
                &output, password.baseAddress!, UInt64(password.count - 1), cost.operations, cost.memoryBytes)
        }
        guard status == 0 else { return nil }
        return String(decoding: output.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func verify(_ password: String, against hash: String) -> Bool {
        hash.withCString { hash in
            password.utf8CString.withUnsafeBufferPointer { password in
                crypto_pwhash_str_verify(hash, password.baseAddress!, UInt64(password.count - 1)) == 0
            }
        }
    }
}
