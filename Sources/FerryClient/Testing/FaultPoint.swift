import Foundation
import Synchronization

/// Named instants at which a test may have the process killed (`SIGKILL`, as `kill -9`
/// would), so that a crash test hits the window it is about instead of a random one.
///
/// Nothing is armed unless a program of this package calls ``arm(_:)`` (ferry-demo does,
/// from `FERRY_DEMO_FAULT`); an app cannot arm one. Unarmed, ``reach(_:)`` is one relaxed
/// atomic load.
package enum FaultPoint: UInt8, CaseIterable, Sendable {
    /// Inside an enqueue's transaction, after its outbox row and before its local row.
    case enqueueBetweenMutationAndRow = 1
    /// After an enqueue's transaction committed, before the call returns.
    case enqueueCommitted
    /// A push's request is about to be sent.
    case pushBeforeSend
    /// The server answered a push `200` (it committed), before the client read the answer.
    case pushAnswered

    /// The name a test arms it by: `enqueue-between-mutation-and-row`, `push-answered`, ….
    package var name: String {
        switch self {
        case .enqueueBetweenMutationAndRow: "enqueue-between-mutation-and-row"
        case .enqueueCommitted: "enqueue-committed"
        case .pushBeforeSend: "push-before-send"
        case .pushAnswered: "push-answered"
        }
    }

    private static let armed = Atomic<UInt8>(0)

    /// Kills the process when it reaches the point named `name`; false when no point has that name.
    @discardableResult
    package static func arm(_ name: String) -> Bool {
        guard let point = allCases.first(where: { $0.name == name }) else { return false }
        armed.store(point.rawValue, ordering: .relaxed)
        return true
    }

    /// The process dies here if this point is armed.
    @inline(__always)
    static func reach(_ point: FaultPoint) {
        guard armed.load(ordering: .relaxed) == point.rawValue else { return }
        kill(getpid(), SIGKILL)
    }
}
