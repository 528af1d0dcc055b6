import FerryHTTP
import FerryLoop
import Synchronization

/// `/healthz`, `/readyz` and `/metrics`: what load balancers and Prometheus ask.
///
/// `/readyz` is ready when the database answers with Ferry's schema at this binary's
/// version and is a primary (``SchemaCheck``), the LISTEN connection is up, and it
/// receives: a NOTIFY it sent itself came back (``ListenerProbe``, kept briefly). Its answer names no
/// host, port or libpq text (anyone may ask); a change of the database's state is
/// logged once, with the details and what to do.
final class OperationsRoutes: Sendable {
    private let contexts: [LoopBound<LoopContext>]
    private let listenerStatus: ListenerStatus
    private let probe: LoopBound<ListenerProbe>
    private let logger: Logger
    /// The database's state the last `/readyz` found, to log changes only.
    private let lastCheck = Mutex<SchemaCheck?>(nil)
    /// The listener probe's outcome the last `/readyz` found, to log changes only.
    private let lastProbe = Mutex<ListenerProbe.Outcome?>(nil)

    init(
        contexts: [LoopBound<LoopContext>], listenerStatus: ListenerStatus, probe: LoopBound<ListenerProbe>,
        logger: Logger
    ) {
        self.contexts = contexts
        self.listenerStatus = listenerStatus
        self.probe = probe
        self.logger = logger
    }

    private static let healthy = HTTPResponse.json(bytes: Array(#"{"status":"ok"}"#.utf8))
    private static let ready = HTTPResponse.json(bytes: Array(#"{"status":"ready"}"#.utf8))

    /// Adds the routes for one loop; handlers use that loop's `context`.
    func register(in router: inout Router, context: LoopContext) {
        router.get("/healthz") { _, responder in
            responder.respond(Self.healthy)
        }
        router.get("/readyz") { [self] _, responder in
            SchemaCheck.run(on: context.pool) { [self] check in
                noteChange(check)
                guard check == .ready else {
                    return responder.respond(.error(status: 503, code: "unavailable", message: check.publicMessage))
                }
                guard listenerStatus.isConnected else {
                    return responder.respond(
                        .error(status: 503, code: "unavailable", message: "listener is not connected"))
                }
                let answering = LoopBound(responder, loop: responder.loop)
                probe.loop.execute { [self] in
                    probe.value.check { [self] outcome in
                        noteChange(outcome)
                        answering.loop.execute {
                            answering.value.respond(
                                outcome == .received
                                    ? Self.ready
                                    : .error(status: 503, code: "unavailable", message: outcome.publicMessage))
                        }
                    }
                }
            }
        }
        router.get("/metrics") { [self] _, responder in
            collectMetrics(answering: LoopBound(responder, loop: responder.loop))
        }
    }

    /// Logs the database's state when it differs from what the previous probe found:
    /// a warning with the advice when it is not ready, a line when it is again.
    private func noteChange(_ check: SchemaCheck) {
        noteChange(check, since: lastCheck, ready: .ready) { $0.advice }
    }

    /// Logs the listener probe's outcome when it differs from the previous probe's.
    private func noteChange(_ outcome: ListenerProbe.Outcome) {
        noteChange(outcome, since: lastProbe, ready: .received, advice: ListenerProbe.advice)
    }

    private func noteChange<State: Equatable & Sendable>(
        _ state: State, since last: borrowing Mutex<State?>, ready: State, advice: (State) -> String
    ) {
        let previous = last.withLock { last in
            defer { last = state }
            return last
        }
        guard previous != state else { return }
        if state != ready {
            logger.log(.warning, "not ready", ["reason": advice(state)])
        } else if previous != nil {
            logger.log(.info, "ready again", ["reason": advice(state)])
        }
    }

    /// Asks every loop for its counters and answers on the requesting loop once all replied.
    private func collectMetrics(answering responder: LoopBound<HTTPResponder>) {
        let gather = Gathering(expected: contexts.count)
        let listenerStatus = self.listenerStatus
        for context in contexts {
            context.loop.execute {
                let snapshot = context.value.snapshot()
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
