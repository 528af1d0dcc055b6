import FerryLoop
import FerryPostgres
import FerryTestSupport
import Foundation
import Synchronization

/// A `Listener` on `ferry_cue` on its own loop thread, collecting every payload.
final class CueInbox: Sendable {
    private let loop: EventLoop
    private let listener: LoopBound<Listener>
    private let payloads = Mutex<[String]>([])
    private let connected = Atomic<Bool>(false)
    private let sentinels = Atomic<Int>(0)

    private init(loop: EventLoop, listener: LoopBound<Listener>) {
        self.loop = loop
        self.listener = listener
    }

    /// Listens with `configuration` (waiting until it listens), runs `body`, stops.
    static func with(_ configuration: PostgresConfiguration, _ body: (CueInbox) async throws -> Void) async throws {
        let loop = EventLoop.spawn(name: "cue-inbox")
        let listener = await withCheckedContinuation { continuation in
            loop.execute {
                continuation.resume(
                    returning: LoopBound(
                        Listener(loop: loop, configuration: configuration, channels: ["ferry_cue"]), loop: loop))
            }
        }
        let inbox = CueInbox(loop: loop, listener: listener)
        loop.execute {
            listener.value.onNotification = { notification in
                inbox.payloads.withLock { $0.append(notification.payload) }
            }
            listener.value.onStateChange = { inbox.connected.store($0 == .connected, ordering: .relaxed) }
            listener.value.start()
        }
        do {
            try await inbox.wait("the listener to connect") { inbox.connected.load(ordering: .relaxed) }
            try await body(inbox)
        } catch {
            await inbox.stop()
            throw error
        }
        await inbox.stop()
    }

    /// The payloads received since the last drain, in order of arrival: sends the cues
    /// pushes queued, as the gateway does after each push's commit (unless not
    /// `sendingQueued`), then a sentinel notification through `sender` and waits for it,
    /// so every transaction committed before this call has been heard (notifications
    /// arrive in commit order). Each payload's writing transaction (`@<xid>` after the
    /// device, sql/ferry/functions/cues.sql) is left out unless `withTransactions`, so that
    /// tests compare `<owner> <device> <table>`.
    func drain(_ sender: PostgresClient, sendingQueued: Bool = true, withTransactions: Bool = false)
        async throws -> [String]
    {
        let payloads = try await drainPayloads(sender, sendingQueued: sendingQueued)
        return withTransactions ? payloads : payloads.map(Self.withoutTransaction)
    }

    /// `payload` without the `@<xid>` that ends its device word, if it has one.
    static func withoutTransaction(_ payload: String) -> String {
        var words = payload.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard words.count == 3, let at = words[1].lastIndex(of: "@"),
            !words[1][words[1].index(after: at)...].isEmpty,
            words[1][words[1].index(after: at)...].allSatisfy({ ("0"..."9").contains($0) })
        else { return payload }
        words[1] = words[1][..<at]
        return words.joined(separator: " ")
    }

    private func drainPayloads(_ sender: PostgresClient, sendingQueued: Bool) async throws -> [String] {
        if sendingQueued { try await sender.query("select ferry.send_queued_cues()") }
        let sentinel = "sentinel \(sentinels.add(1, ordering: .relaxed).newValue)"
        try await sender.query("select pg_notify('ferry_cue', $1)", [sentinel])
        try await wait("the sentinel notification") { self.payloads.withLock { $0.contains(sentinel) } }
        return payloads.withLock { payloads in
            guard let index = payloads.firstIndex(of: sentinel) else {
                preconditionFailure("the sentinel was seen and only drain removes payloads")
            }
            defer { payloads.removeSubrange(...index) }
            return Array(payloads[..<index])
        }
    }

    /// Polls `condition` for at most 20 s (``eventually(_:seconds:_:)``).
    private func wait(_ what: String, _ condition: () -> Bool) async throws {
        try await eventually(what) { condition() }
    }

    private func stop() async {
        let (loop, listener) = (self.loop, self.listener)
        await withCheckedContinuation { continuation in
            loop.execute {
                listener.value.stop()
                continuation.resume()
            }
        }
        loop.stop()
    }
}
