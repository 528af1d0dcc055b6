import Synchronization

/// The LISTEN connection's state and counters: written on the listener's loop, read
/// by `/readyz` and `/metrics` on any loop.
final class ListenerStatus: Sendable {
    private let connected = Atomic<Bool>(false)
    private let reconnectCount = Atomic<Int>(0)
    private let cueCount = Atomic<Int>(0)

    var isConnected: Bool {
        get { connected.load(ordering: .relaxed) }
        set { connected.store(newValue, ordering: .relaxed) }
    }

    func reconnected() { reconnectCount.add(1, ordering: .relaxed) }

    func cuesReceived(_ count: Int) { cueCount.add(count, ordering: .relaxed) }

    var figures: ListenerFigures {
        ListenerFigures(
            isConnected: isConnected, reconnects: reconnectCount.load(ordering: .relaxed),
            cuesReceived: cueCount.load(ordering: .relaxed))
    }
}
