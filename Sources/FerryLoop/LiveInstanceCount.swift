import Synchronization

/// How many instances of one kind of object exist right now: created and not yet
/// deinitialized. Any thread.
///
/// An owner increments it in `init` and decrements it in `deinit`, so tests can prove
/// that nothing keeps an object alive after its work is done (a closed connection, a
/// stream whose client left). It costs one relaxed atomic add each way.
package final class LiveInstanceCount: Sendable {
    private let count = Atomic<Int>(0)

    /// Zero instances.
    package init() {}

    /// The instances alive now.
    package var value: Int { count.load(ordering: .relaxed) }

    /// One more instance (call it from `init`).
    package func increment() { count.add(1, ordering: .relaxed) }

    /// One instance fewer (call it from `deinit`).
    package func decrement() { count.subtract(1, ordering: .relaxed) }
}
