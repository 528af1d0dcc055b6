/// The life of one HTTP/1.1 connection as a plain value: no sockets, no clock of its own.
///
/// The owner feeds it events (``read(_:now:)``, ``respond(sequence:response:route:now:)``,
/// ``queuedForWriting(_:now:)``, ``inputEnded(now:)``, ``timerFired(now:)``,
/// ``shutdown(now:)``) and then calls
/// ``nextAction()`` until it says ``Action/wait``, performing each action. Times are
/// monotonic nanoseconds supplied by the owner, so tests drive the clock.
///
/// Pipelining: every request is dispatched as soon as it is decoded, so handlers of
/// pipelined requests may run at the same time, but responses go out strictly in
/// request order; a response that is ready early waits in its slot. At most
/// ``HTTPLimits/maxPipelinedRequests`` requests are held; beyond that the machine
/// stops decoding, keeps the undecoded bytes and asks the owner to pause reading.
///
/// Backpressure: the owner reports the bytes it holds for writing (its output buffer and
/// the socket's unsent bytes) after each write and whenever they drain. While they exceed
/// ``HTTPLimits/maxUnsentBytes`` the machine reads and decodes nothing (the answers of
/// requests already dispatched are still written), until they fall to a quarter of the
/// bound. Counting requests is not enough: one 64 KiB read holds thousands of small
/// pipelined requests, whose answers would pile up when the client does not read them.
///
/// Timeouts (one deadline at a time, see ``deadline``): from connection open, and from
/// the first byte of each later request, the head must complete within the head
/// timeout; a body must make progress within the idle timeout, and arrive whole within
/// the body timeout from its head (or from its `100 Continue`), else it is answered
/// `408 request_timeout` and the connection closes; a connection with
/// nothing in flight is closed after the idle timeout; so is a connection over the write
/// bound whose client takes none of its bytes for the idle timeout, whatever is in
/// flight, and one that closes after its last answer while its client takes none of
/// what is left of it (a close after writes waits for the client to read them). Expiry,
/// but for the body timeout's, closes the socket without a response: a client this slow
/// is usually not reading either.
///
/// Admission (``HeadAdmission``): when a head is complete and a body follows, the route's
/// head check and the body budget decide before a byte of the body is read; a refusal is
/// that request's answer and the connection closes after it. A body's charge to the
/// budget is given back once its answer is written or the connection closes.
///
/// A trusted proxy's connection (``HeadAdmission/trustedProxies``) may start with a
/// PROXY protocol header (``ProxyHeaderDecoder``, told by its signature), read before
/// any HTTP and within the head timeout from open; the client it names is whom every
/// request comes from. Without one, the connection speaks for the proxy, and each
/// request's `X-Forwarded-For` says whom it serves (``TrustedProxies/client(of:headers:)``):
/// what a gateway forwarding a sign-in to another shard sends. A signature followed by
/// no valid header is answered `400` and the connection closes. Any other peer's
/// connection is plain HTTP, where a PROXY header is bad HTTP.
struct HTTPConnectionStateMachine {
    /// What the owner must do next.
    enum Action {
        /// Route `request` and run its handler; answer later with the same `sequence`.
        case dispatch(HTTPRequest, sequence: UInt64)
        /// Serialize and send `response` (the head-of-line answer).
        case write(HTTPResponse, ResponseContext)
        /// Send `HTTP/1.1 100 Continue` (the client waits for it before sending the body).
        case writeContinue
        /// Have the kernel acknowledge the bytes read so far now, not after its delayed-ACK
        /// timer: a head was read and its body is still to come. A client that writes the
        /// head and the body in two segments with Nagle's algorithm on holds the body
        /// until the head is acknowledged (~40 ms on Linux).
        case acknowledgeReceived
        /// Stop reading the socket (pipeline full, or no more requests will be read).
        case pauseReading
        /// Start reading the socket again.
        case resumeReading
        /// Close once everything written so far is sent. The machine is done.
        case closeAfterWrites
        /// Close now, dropping unsent bytes. The machine is done.
        case close
        /// Nothing to do until the next event.
        case wait
    }

    /// What the serializer and the observer need to know about the request a response answers.
    struct ResponseContext: Equatable {
        /// The request's sequence number on this connection (0, 1, …).
        var sequence: UInt64
        /// The request's method, or nil when the request could not be parsed.
        var method: HTTPMethod?
        /// The route pattern that answered, or nil (no route matched, or refused before routing).
        var route: String?
        /// Whether the request was HTTP/1.0 (which needs an explicit `Connection: keep-alive`).
        var isHTTP10: Bool
        /// Whether the connection closes after this response (`Connection: close`).
        var closesConnection: Bool
        /// When the request was fully received.
        var receivedAt: UInt64
        /// Who sent the request (for a refusal before one was read, whom the connection
        /// speaks for).
        var remoteAddress: ClientAddress? = nil
    }

    /// Timeouts in nanoseconds.
    struct Timeouts {
        var head: UInt64
        var idle: UInt64
        /// How long a body may take from its head, whatever its pace.
        var body: UInt64 = .max / 4
    }

    private enum Lifecycle {
        /// Reading and answering requests.
        case open
        /// No more requests will be read; answer those in flight, then close.
        case draining
        /// The last response was handed out; the close action comes next.
        case closing
        /// Close-after-writes was handed out: what is left is to close the socket if its
        /// client stops taking the last answers.
        case finishing
        /// A close action was handed out (or the socket closed). Everything is ignored.
        case closed
        /// A handler took the socket over; HTTP is done with it.
        case upgraded
    }

    /// One request received and not yet answered on the wire.
    private struct Slot {
        var request: HTTPRequest?
        var response: HTTPResponse?
        var route: String?
        var method: HTTPMethod?
        var isHTTP10: Bool
        var keepAlive: Bool
        var receivedAt: UInt64
        /// What the request's body holds of the budget until its answer is written.
        var charged = 0
        /// Who sent it.
        var remoteAddress: ClientAddress?
    }

    private var decoder: HTTPRequestDecoder
    /// Reads the PROXY header a trusted proxy's connection may start with; nil once read
    /// (or once the first bytes showed there is none), and for every other peer.
    private var proxyHeader: ProxyHeaderDecoder?
    /// Whom the connection speaks for: its peer, then the client its PROXY header named.
    private var client: ClientAddress?
    private let maxPipelined: Int
    private let maxUnsent: Int
    /// The owner's bytes waiting to be written, as last reported.
    private var queuedBytes = 0
    /// Over the write bound: read and decode nothing until the queue drains.
    private var isBackedUp = false
    /// When the queue went over the bound, or last shrank since (the client took bytes).
    private var writeProgressAt: UInt64 = 0
    private let timeouts: Timeouts
    private var lifecycle = Lifecycle.open
    /// Requests in order; `slots[0]` has sequence `firstSequence`. Never more than `maxPipelined + 1` long.
    private var slots: [Slot] = []
    private var firstSequence: UInt64 = 0
    /// Index in `slots` of the first request not dispatched yet.
    private var nextDispatch = 0
    /// Bytes read but not decoded yet (pipeline full, or bytes after an upgrade request).
    private var stash: [UInt8] = []
    private var isReading = true
    private var inputHasEnded = false
    private var upgradePending = false
    private var continueSent = false
    /// The last read left a body incomplete: acknowledge it before waiting.
    private var acknowledgePending = false
    /// Shutdown began while a request was arriving: it is the connection's last.
    private var shutdownRequested = false
    // Clock readings behind the deadline.
    private var now: UInt64
    private var idleSince: UInt64
    private var servedAny = false
    /// When the head being read started; the connection's open counts for the first request.
    private var headStartedAt: UInt64?
    private var bodyProgressAt: UInt64 = 0
    /// When the body being read started (its head completed, or its `100 Continue` went out).
    private var bodyStartedAt: UInt64?

    /// A machine for a connection opened at `now`, which the owner has started reading.
    init(limits: HTTPLimits, timeouts: Timeouts, now: UInt64, admission: HeadAdmission = .none) {
        decoder = HTTPRequestDecoder(limits: limits, admission: admission)
        client = admission.client
        if let peer = admission.client, admission.trustedProxies.contains(peer.ip) {
            proxyHeader = ProxyHeaderDecoder()
        }
        maxPipelined = limits.maxPipelinedRequests
        maxUnsent = limits.maxUnsentBytes
        self.timeouts = timeouts
        self.now = now
        idleSince = now
        headStartedAt = now
        slots.reserveCapacity(4)
    }

    // MARK: - Events

    /// Bytes arrived. They are decoded (or copied) before this returns.
    mutating func read(_ bytes: UnsafeRawBufferPointer, now: UInt64) {
        self.now = now
        switch lifecycle {
        case .open:
            guard proxyHeader != nil else { return readRequests(bytes) }
            switch readProxyHeader(bytes) {
            case .wait:
                return
            case .requests(let rest):
                if !rest.isEmpty { readRequests(rest) }
            case .requestsAfter(let earlier):
                // At most a signature's first bytes, from slow reads: rare, and small.
                (earlier + Array(bytes)).withUnsafeBytes { readRequests($0) }
            }
        case .draining where upgradePending:
            // Bytes after an upgrade request belong to the next protocol: keep them for the taker.
            stash.append(contentsOf: bytes)
        case .draining, .closing, .finishing, .closed, .upgraded:
            // No more requests will be answered; whatever the client sends is dropped.
            return
        }
    }

    /// Bytes of an open connection past its PROXY header, if any: decoded, or stashed
    /// while the pipeline is full or the writes are backed up.
    private mutating func readRequests(_ bytes: UnsafeRawBufferPointer) {
        if !stash.isEmpty || slots.count >= maxPipelined || isBackedUp {
            stash.append(contentsOf: bytes)
            return
        }
        let consumed = decodeRequests(from: bytes)
        // Set at each such read: the kernel leaves quick-ack mode again on its own.
        if decoder.progress == .body { acknowledgePending = true }
        if consumed < bytes.count && (lifecycle == .open || upgradePending) {
            stash.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[consumed...]))
        }
    }

    /// What a read's bytes hold once the PROXY header's decoder has seen them.
    private enum HeaderRead {
        /// The header is incomplete, or it was refused (answered `400`, then the close).
        case wait
        /// The header is done with; these bytes of the read follow it.
        case requests(UnsafeRawBufferPointer)
        /// There is no header: `earlier` (held from earlier reads), then the whole read.
        case requestsAfter(earlier: [UInt8])
    }

    /// Feeds the PROXY header's decoder.
    private mutating func readProxyHeader(_ bytes: UnsafeRawBufferPointer) -> HeaderRead {
        switch proxyHeader!.decode(bytes) {
        case .needMoreBytes:
            return .wait
        case .header(let header, let consumed):
            proxyHeader = nil
            if let source = header.source {
                client = source
                decoder.speak(for: source)
            }
            return .requests(UnsafeRawBufferPointer(rebasing: bytes[consumed...]))
        case .noHeader:
            let earlier = proxyHeader!.earlier
            proxyHeader = nil
            return earlier.isEmpty ? .requests(bytes) : .requestsAfter(earlier: earlier)
        case .invalid(let reason):
            proxyHeader = nil
            slots.append(
                Slot(
                    response: .error(
                        status: .badRequest, code: "invalid_request", message: "PROXY protocol: \(reason)"),
                    isHTTP10: false, keepAlive: false, receivedAt: now, remoteAddress: client))
            lifecycle = .draining
            return .wait
        }
    }

    /// The handler of request `sequence` answered. Ignored once the connection is closed.
    mutating func respond(sequence: UInt64, response: HTTPResponse, route: String?, now: UInt64) {
        self.now = now
        guard lifecycle == .open || lifecycle == .draining else { return }
        guard sequence >= firstSequence, sequence - firstSequence < UInt64(nextDispatch) else {
            preconditionFailure("respond called twice, or for a request this connection never dispatched")
        }
        let index = Int(sequence - firstSequence)
        precondition(slots[index].response == nil, "respond called twice for one request")
        slots[index].response = response
        slots[index].route = route
    }

    /// The owner now holds `bytes` for writing: its unflushed output and the socket's
    /// unsent bytes. Report after every write, after a flush, when the socket drains, and
    /// before ``timerFired(now:)`` (which learns from it whether the client took any).
    mutating func queuedForWriting(_ bytes: Int, now: UInt64) {
        self.now = now
        guard lifecycle != .closed && lifecycle != .upgraded else { return }
        if bytes < queuedBytes { writeProgressAt = now }
        queuedBytes = bytes
        if !isBackedUp && bytes > maxUnsent {
            isBackedUp = true
            writeProgressAt = now
        } else if isBackedUp && bytes <= maxUnsent / 4 {
            isBackedUp = false
            // The wait was ours, not the client's: the head, body and idle clocks restart.
            idleSince = now
            bodyProgressAt = now
            if headStartedAt != nil { headStartedAt = now }
            if bodyStartedAt != nil { bodyStartedAt = now }
        }
    }

    /// The peer sent its last byte. Requests already received are still answered.
    mutating func inputEnded(now: UInt64) {
        self.now = now
        inputHasEnded = true
    }

    /// The connection's timer fired. Returns ``Action/close`` when the deadline has passed,
    /// but for a body past the body timeout: that one is answered `408` (the next actions)
    /// and the connection closes after it.
    mutating func timerFired(now: UInt64) -> Action {
        self.now = now
        guard let deadline, now >= deadline else { return .wait }
        if isPastBodyTimeout {
            decoder.abandon()
            bodyStartedAt = nil
            slots.append(
                Slot(
                    response: HTTPRequestError.bodyTimeout.response, isHTTP10: false, keepAlive: false, receivedAt: now,
                    remoteAddress: client)
            )
            lifecycle = .draining
            return .wait
        }
        lifecycle = .closed
        return .close
    }

    private var isPastBodyTimeout: Bool {
        guard lifecycle == .open, !isBackedUp, slots.isEmpty, decoder.progress == .body, let bodyStartedAt else {
            return false
        }
        return now >= bodyStartedAt + timeouts.body
    }

    /// The server is shutting down: read no more requests, answer those in flight (the
    /// last with `Connection: close`), then close. An idle connection closes at once.
    ///
    /// A request whose head or body is still arriving is in flight too: it is read to
    /// its end and answered, and nothing after it is.
    mutating func shutdown(now: UInt64) {
        self.now = now
        guard lifecycle == .open else { return }
        shutdownRequested = true
        if decoder.progress == .idle {
            lifecycle = .draining
            stash = []
        }
    }

    /// The socket closed (from either side). Pending answers will be ignored, and what
    /// their bodies held of the budget is given back.
    mutating func closed() {
        lifecycle = .closed
        releaseCharges()
        stash = []
    }

    private mutating func releaseCharges() {
        for slot in slots { decoder.release(slot.charged) }
        slots = []
        decoder.abandon()
    }

    /// Hands the connection over to another protocol in answer to request `sequence`.
    ///
    /// Allowed only when that request is the one request in flight and nothing of a later
    /// request has been parsed; returns the bytes read after it (the new protocol's first
    /// bytes), or nil when not allowed.
    mutating func takeOver(sequence: UInt64) -> [UInt8]? {
        guard lifecycle == .open || lifecycle == .draining, slots.count == 1, nextDispatch == 1,
            firstSequence == sequence, slots[0].response == nil,
            decoder.progress == .idle || upgradePending
        else { return nil }
        lifecycle = .upgraded
        releaseCharges()
        defer { stash = [] }
        return stash
    }

    // MARK: - Actions

    /// The next thing the owner must do; call until it returns ``Action/wait``.
    mutating func nextAction() -> Action {
        while true {
            switch lifecycle {
            case .finishing, .closed, .upgraded:
                return .wait
            case .closing:
                return finish()
            case .open, .draining:
                break
            }
            if let request = takeNextToDispatch() {
                return .dispatch(request, sequence: firstSequence + UInt64(nextDispatch - 1))
            }
            if let response = slots.first?.response {
                return .write(response, popHeadOfLine())
            }
            if lifecycle == .open && !isBackedUp && !stash.isEmpty && slots.count < maxPipelined {
                decodeStash()
                continue
            }
            if lifecycle == .open && inputHasEnded && stash.isEmpty {
                // A half-sent request can never complete; answered ones still go out.
                lifecycle = .draining
            }
            if lifecycle == .draining && slots.isEmpty {
                return finish()
            }
            let wantsReading =
                lifecycle == .open && !inputHasEnded && !isBackedUp && slots.count < maxPipelined && stash.isEmpty
            if wantsReading != isReading {
                isReading = wantsReading
                return wantsReading ? .resumeReading : .pauseReading
            }
            if lifecycle == .open && !isBackedUp && slots.isEmpty && !continueSent && decoder.awaitsContinue {
                continueSent = true
                // The 100 carries the acknowledgement; the body's clocks start with it.
                acknowledgePending = false
                bodyStartedAt = now
                bodyProgressAt = now
                return .writeContinue
            }
            if acknowledgePending && lifecycle == .open {
                acknowledgePending = false
                return .acknowledgeReceived
            }
            return .wait
        }
    }

    private mutating func finish() -> Action {
        lifecycle = .finishing
        // The last answers' clock starts now, unless the client was already taking nothing.
        if !isBackedUp { writeProgressAt = now }
        return .closeAfterWrites
    }

    /// When the connection should be closed for want of progress, in the owner's clock;
    /// nil while requests are in flight (the handlers own that time) or after closing,
    /// unless bytes wait for the client: over the write bound, or after the last answer,
    /// the client must take some of them within the idle timeout.
    var deadline: UInt64? {
        switch lifecycle {
        case .closed, .upgraded: return nil
        case .finishing: return queuedBytes > 0 ? writeProgressAt + timeouts.idle : nil
        case .open, .draining, .closing: break
        }
        if isBackedUp { return writeProgressAt + timeouts.idle }
        guard lifecycle == .open, slots.isEmpty else { return nil }
        switch decoder.progress {
        case .head: return (headStartedAt ?? now) + timeouts.head
        case .body: return min(bodyProgressAt + timeouts.idle, (bodyStartedAt ?? now) + timeouts.body)
        // Before the first answer, idle means the first head has not begun: the head timeout runs from open.
        case .idle: return idleSince + (servedAny ? timeouts.idle : timeouts.head)
        }
    }

    /// Requests received and not yet answered on the wire.
    var requestsInFlight: Int { slots.count }

    // MARK: - Decoding

    /// Decodes requests from `bytes` while the pipeline has room; returns the bytes consumed.
    private mutating func decodeRequests(from bytes: UnsafeRawBufferPointer) -> Int {
        var offset = 0
        while offset < bytes.count && slots.count < maxPipelined && lifecycle == .open {
            let (consumed, event) = decoder.decode(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            offset += consumed
            switch event {
            case .needMoreBytes:
                break
            case .request(let request, let isHTTP10, let charged):
                slots.append(
                    Slot(
                        request: request, method: request.method, isHTTP10: isHTTP10,
                        keepAlive: request.keepAlive, receivedAt: now, charged: charged,
                        remoteAddress: request.remoteAddress))
                headStartedAt = nil
                bodyStartedAt = nil
                continueSent = false
                if request.isUpgrade {
                    upgradePending = true
                    lifecycle = .draining
                } else if !request.keepAlive || shutdownRequested {
                    lifecycle = .draining
                }
            case .error(let error):
                slots.append(
                    Slot(
                        response: error.response, isHTTP10: false, keepAlive: false, receivedAt: now,
                        remoteAddress: client))
                lifecycle = .draining
            case .refused(let response):
                slots.append(
                    Slot(response: response, isHTTP10: false, keepAlive: false, receivedAt: now, remoteAddress: client))
                lifecycle = .draining
            }
        }
        switch decoder.progress {
        case .head where headStartedAt == nil: headStartedAt = now
        case .body:
            bodyProgressAt = now
            if bodyStartedAt == nil { bodyStartedAt = now }
        default: break
        }
        return offset
    }

    private mutating func decodeStash() {
        let consumed = stash.withUnsafeBytes { decodeRequests(from: $0) }
        if lifecycle == .open || upgradePending {
            stash.removeFirst(consumed)
        } else {
            stash = []
        }
    }

    // MARK: - Answering

    private mutating func takeNextToDispatch() -> HTTPRequest? {
        while nextDispatch < slots.count {
            let index = nextDispatch
            nextDispatch += 1
            if let request = slots[index].request {
                slots[index].request = nil
                return request
            }
            // An error slot: its response is already there; nothing to dispatch.
        }
        return nil
    }

    private mutating func popHeadOfLine() -> ResponseContext {
        let slot = slots.removeFirst()
        decoder.release(slot.charged)
        let sequence = firstSequence
        firstSequence += 1
        nextDispatch -= 1
        // Upgrade requests never keep alive: unless taken over, their connection closes.
        let closes = !slot.keepAlive || (lifecycle == .draining && slots.isEmpty)
        if closes {
            precondition(slots.isEmpty, "a request after one that closes the connection was read")
            lifecycle = .closing
        }
        if slots.isEmpty {
            idleSince = now
            servedAny = true
        }
        return ResponseContext(
            sequence: sequence, method: slot.method, route: slot.route, isHTTP10: slot.isHTTP10,
            closesConnection: closes, receivedAt: slot.receivedAt, remoteAddress: slot.remoteAddress)
    }
}
