import FerryHTTP
import FerryLoop
import Synchronization

/// `/healthz`, `/readyz` and `/metrics`: what load balancers and Prometheus ask.
final class OperationsRoutes: Sendable {
    private let workers: [LoopBound<Worker>]
    private let listenerStatus: ListenerStatus

    init(workers: [LoopBound<Worker>], listenerStatus: ListenerStatus) {
        self.workers = workers
        self.listenerStatus = listenerStatus
    }

    private static let healthy = HTTPResponse.json(bytes: Array(#"{"status":"ok"}"#.utf8))
    private static let ready = HTTPResponse.json(bytes: Array(#"{"status":"ready"}"#.utf8))

    /// Adds the routes for one loop; handlers use that loop's `worker`.
    func register(in router: inout Router, worker: Worker) {
        router.get("/healthz") { _, responder in
            responder.respond(Self.healthy)
        }
        router.get("/readyz") { [listenerStatus] _, responder in
            worker.pool.query("select 1") { result in
                switch (result, listenerStatus.isConnected) {
                case (.success, true):
                    responder.respond(Self.ready)
                case (.success, false):
                    responder.respond(.error(status: 503, code: "unavailable", message: "listener is not connected"))
                case (.failure(let error), _):
                    responder.respond(
                        .error(status: 503, code: "unavailable", message: "database is not reachable: \(error.message)")
                    )
                }
            }
        }
        router.get("/metrics") { [self] _, responder in
            collectMetrics(answering: LoopBound(responder, loop: responder.loop))
        }
    }

    /// Asks every loop for its counters and answers on the requesting loop once all replied.
    private func collectMetrics(answering responder: LoopBound<HTTPResponder>) {
        let gather = Gathering(expected: workers.count)
        let listenerStatus = self.listenerStatus
        for worker in workers {
            worker.loop.execute {
                let snapshot = worker.value.snapshot()
                guard let total = gather.add(snapshot) else { return }
                let text = total.prometheusText(listener: listenerStatus.figures)
                responder.loop.execute {
                    var response = HTTPResponse.text(text)
                    response.headers.replaceOrAdd(
                        name: "Content-Type", value: "text/plain; version=0.0.4; charset=utf-8")
                    responder.value.respond(response)
                }
            }
        }
    }
}

/// Merges the snapshots of every loop; the last one to arrive gets the total.
private final class Gathering: Sendable {
    private let state: Mutex<(remaining: Int, total: MetricsSnapshot)>

    init(expected: Int) {
        state = Mutex((remaining: expected, total: MetricsSnapshot()))
    }

    /// Adds one loop's snapshot; returns the total when it was the last.
    func add(_ snapshot: MetricsSnapshot) -> MetricsSnapshot? {
        state.withLock { state in
            state.total.merge(snapshot)
            state.remaining -= 1
            return state.remaining == 0 ? state.total : nil
        }
    }
}
