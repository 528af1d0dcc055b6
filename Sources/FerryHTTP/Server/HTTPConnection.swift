import FerryLoop
import Glibc

/// One accepted HTTP connection: performs what its ``HTTPConnectionStateMachine`` asks.
///
/// The thin I/O half of the connection. It reads into the machine, routes dispatched
/// requests, serializes responses into one output buffer that is flushed once per
/// batch (pipelined answers leave in one write), and keeps one timer per connection
/// that is re-armed only when the deadline moves earlier (the common case, a later
/// deadline, costs nothing: the timer fires, finds it early, and re-arms once). It tells
/// the machine how many bytes wait to be written (the output buffer and the socket's
/// unsent bytes) after each write and when the socket drains, so a client that does not
/// read its answers stops being read (``HTTPLimits/maxUnsentBytes``).
/// Loop thread only; kept alive by its ``HTTPServerLoop`` until the socket closes.
final class HTTPConnection: TCPConnectionDelegate {
    let tcp: TCPConnection
    /// The TCP peer as `ip:port` (a trusted proxy's, whose clients the requests name).
    let remoteAddress: String?
    private unowned let home: HTTPServerLoop
    private var machine: HTTPConnectionStateMachine
    private let timer: Timer
    private var timerDeadline: UInt64?
    private var onTimer: (() -> Void)?
    private var output: [UInt8] = []
    private var isDriving = false
    private var now: UInt64

    /// Bodies up to this size are copied behind their head (one write); larger ones go
    /// to the socket directly after the head.
    private static let inlineBodyLimit = 16 * 1024

    var loop: EventLoop { tcp.loop }

    init(tcp: TCPConnection, home: HTTPServerLoop) {
        self.tcp = tcp
        self.home = home
        now = MonotonicClock.now()
        let peer = tcp.peerAddress.map { ClientAddress(IPAddress($0), port: $0.port) }
        remoteAddress = peer?.description
        machine = HTTPConnectionStateMachine(
            limits: home.limits, timeouts: home.timeouts, now: now,
            admission: HeadAdmission(
                headCheck: home.headChecks, budget: home.budget, client: peer, trustedProxies: home.trustedProxies))
        timer = Timer(loop: tcp.loop)
        // The socket stops reading past the same bound on its own, which also holds once
        // a stream has taken the connection over.
        tcp.highWaterMark = home.limits.maxUnsentBytes
        tcp.lowWaterMark = home.limits.maxUnsentBytes / 4
    }

    /// Starts reading and arms the head timeout.
    func start() {
        onTimer = { [weak self] in self?.timerFired() }
        tcp.delegate = self
        tcp.startReading()
        home.observer?.connectionOpened(remoteAddress: remoteAddress)
        drive()
    }

    // MARK: - Events

    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        now = MonotonicClock.now()
        machine.read(bytes, now: now)
        drive()
    }

    func connectionDidReachEnd(_ connection: TCPConnection) {
        now = MonotonicClock.now()
        machine.inputEnded(now: now)
        drive()
    }

    func connectionDidDrain(_ connection: TCPConnection) {
        reportQueue()
    }

    func connectionDidFlush(_ connection: TCPConnection) {
        reportQueue()
    }

    private func reportQueue() {
        now = MonotonicClock.now()
        machine.queuedForWriting(output.count + tcp.unsentBytes, now: now)
        drive()
    }

    func connectionDidClose(_ connection: TCPConnection, error: LoopError?) {
        machine.closed()
        timer.close()
        onTimer = nil
        home.connectionClosed(self)
    }

    /// A handler's answer to request `sequence`.
    func respond(sequence: UInt64, response: HTTPResponse, route: String?) {
        loop.preconditionInEventLoop()
        now = MonotonicClock.now()
        machine.respond(sequence: sequence, response: response, route: route, now: now)
        drive()
    }

    /// The server is shutting down: finish what is in flight, then close.
    func shutdown() {
        now = MonotonicClock.now()
        machine.shutdown(now: now)
        drive()
    }

    /// The shutdown deadline passed: close now, dropping whatever is unsent.
    func forceClose() {
        machine.closed()
        tcp.close()
    }

    func takeOver(
        sequence: UInt64, route: String?, _ body: (TCPConnection, [UInt8]) -> Void
    ) -> Bool {
        loop.preconditionInEventLoop()
        guard let buffered = machine.takeOver(sequence: sequence) else {
            respond(
                sequence: sequence,
                response: .error(
                    status: .badRequest, code: "invalid_request",
                    message: "cannot switch protocols with other requests in flight"),
                route: route)
            return false
        }
        flush()
        timer.close()
        onTimer = nil
        tcp.pauseReading()
        tcp.delegate = nil
        home.connectionClosed(self)
        body(tcp, buffered)
        return true
    }

    private func timerFired() {
        timerDeadline = nil
        now = MonotonicClock.now()
        machine.queuedForWriting(output.count + tcp.unsentBytes, now: now)
        if case .close = machine.timerFired(now: now) {
            output.removeAll()
            tcp.close()
        }
        drive()
    }

    // MARK: - Performing actions

    private func drive() {
        // A handler answering at once calls back into `respond` from inside `dispatch`:
        // the outer loop picks the answer up, so nothing runs twice.
        guard !isDriving else { return }
        isDriving = true
        defer { isDriving = false }
        while true {
            switch machine.nextAction() {
            case .dispatch(let request, let sequence):
                dispatch(request, sequence: sequence)
            case .write(let response, let context):
                write(response, context: context)
                machine.queuedForWriting(output.count + tcp.unsentBytes, now: now)
            case .writeContinue:
                output.append(contentsOf: HTTPResponseEncoder.continueHead)
            case .acknowledgeReceived:
                tcp.acknowledgeReceived()
            case .pauseReading:
                tcp.pauseReading()
            case .resumeReading:
                tcp.startReading()
            case .closeAfterWrites:
                flush()
                machine.queuedForWriting(tcp.unsentBytes, now: now)
                // The machine gives a client that takes nothing of the last answers the idle timeout.
                tcp.closeAfterWrites(drainMilliseconds: nil)
            case .close:
                output.removeAll()
                tcp.close()
            case .wait:
                if !output.isEmpty {
                    // What the kernel took may let the machine read on.
                    flush()
                    machine.queuedForWriting(tcp.unsentBytes, now: now)
                    continue
                }
                armTimer()
                return
            }
        }
    }

    private func dispatch(_ request: HTTPRequest, sequence: UInt64) {
        var request = request
        let cors = home.cors
        let corsOrigin = cors.isEmpty ? nil : cors.allowedOrigin(of: request)
        func answer(_ response: HTTPResponse, route: String?) {
            var response = response
            if let corsOrigin { CORSPolicy.decorate(&response, origin: corsOrigin) }
            machine.respond(sequence: sequence, response: response, route: route, now: now)
        }
        switch home.router.match(method: request.method, path: request.path) {
        case .found(let handler, let parameters, let pattern):
            request.pathParameters = parameters
            handler(
                request, HTTPResponder(connection: self, sequence: sequence, route: pattern, corsOrigin: corsOrigin))
        case .methodNotAllowed(let allowed):
            if let preflight = cors.preflight(request, methods: allowed) {
                return machine.respond(sequence: sequence, response: preflight, route: nil, now: now)
            }
            var response = HTTPResponse.error(
                status: .methodNotAllowed, code: "method_not_allowed",
                message: "\(request.method) is not allowed on this path")
            response.headers.add(name: "Allow", value: allowed.map(\.name).joined(separator: ", "))
            answer(response, route: nil)
        case .notFound:
            answer(.error(status: .notFound, code: "not_found", message: "no such path"), route: nil)
        case .undecodable(let parameter, let pattern):
            let error = URLDecodingError(name: parameter)
            answer(
                .error(status: .badRequest, code: "invalid_request", message: "path segment \(error)"), route: pattern)
        }
    }

    private func write(_ response: HTTPResponse, context: HTTPConnectionStateMachine.ResponseContext) {
        let headStart = output.count
        let sendsBody = HTTPResponseEncoder.encodeHead(
            response, context: context, date: home.date, now: now, into: &output)
        var written = output.count - headStart
        if sendsBody {
            if response.body.count <= HTTPConnection.inlineBodyLimit {
                output.append(contentsOf: response.body)
            } else {
                flush()
                tcp.write(response.body)
            }
            written += response.body.count
        }
        if let observer = home.observer {
            observer.responseSent(
                HTTPResponseRecord(
                    method: context.method, route: context.route, status: response.status,
                    durationNanoseconds: now &- context.receivedAt, responseBytes: written,
                    remoteAddress: context.remoteAddress))
        }
    }

    private func flush() {
        guard !output.isEmpty else { return }
        tcp.write(output)
        // Keep a small buffer for the next answer; let a big one go.
        if output.capacity > 4 * HTTPConnection.inlineBodyLimit {
            output = []
        } else {
            output.removeAll(keepingCapacity: true)
        }
    }

    private func armTimer() {
        guard let deadline = machine.deadline, let onTimer else { return }
        // An armed timer that fires no later than the deadline re-checks then.
        if let armed = timerDeadline, armed <= deadline { return }
        timerDeadline = deadline
        let remaining = deadline > now ? deadline - now : 0
        timer.start(after: (remaining + 999_999) / 1_000_000, onTimer)
    }
}
