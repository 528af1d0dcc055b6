import FerryLoad
import FerryLoop
import Foundation

/// One device of the storm (``StormWorker``): a stream, a keep-alive connection for its
/// pulls, and the cursor of its last pull. It pulls once when the stream says hello and
/// on every cue (one pull in flight; a cue meanwhile pulls again after; `has_more` pulls
/// again at once). Loop thread only; owned by its ``StormLoop``.
final class StormDevice {
    enum Phase { case waiting, opening, ready, failed }

    let index: Int
    let token: String
    let serverIndex: Int
    let transport: StreamTransport
    unowned let owner: StormLoop
    let http: HTTPClientConnection
    var phase = Phase.waiting
    var cursor: String?
    var needsPull = false
    var waitingToRetry = false
    var retries = 0
    /// Times in a row the stream closed or could not open.
    var streamRetries = 0
    /// Keys of the expected rows seen since the expectation was set.
    var seen: Set<String> = []
    /// When the pull answer that completed the expectation was read (monotonic ns).
    var gotAt: UInt64?

    init(index: Int, token: String, serverIndex: Int, transport: StreamTransport, owner: StormLoop) {
        self.index = index
        self.token = token
        self.serverIndex = serverIndex
        self.transport = transport
        self.owner = owner
        http = HTTPClientConnection(
            loop: owner.loop, server: owner.servers[serverIndex], source: owner.source(for: index))
    }

    /// A pull in flight, waiting to be retried, or due.
    var isBusy: Bool { http.isBusy || waitingToRetry || needsPull }

    /// Opens the stream; the device is ready once its pull after hello answered.
    func open() {
        phase = .opening
        owner.openStream(for: self)
    }

    func streamOpened() {
        streamRetries = 0
        needsPull = true
        pump()
    }

    func cued() {
        needsPull = true
        pump()
    }

    /// The stream could not open or closed: open it again after 100 ms to 1 s (its hello
    /// pulls, so nothing is missed); the tenth time in a row ends the device.
    func streamEnded() {
        guard phase == .opening || phase == .ready else { return }
        streamRetries += 1
        guard streamRetries <= 10 else { return fail("stream closed \(streamRetries - 1) times in a row") }
        owner.countError("stream:reopened")
        owner.loop.schedule(after: UInt64.random(in: 100...1000)) { [self] in
            guard phase == .opening || phase == .ready else { return }
            owner.openStream(for: self)
        }
    }

    private func pump() {
        guard phase == .opening || phase == .ready, needsPull, !http.isBusy, !waitingToRetry else { return }
        pull()
    }

    private func pull() {
        needsPull = false
        let query = cursor.map { "?cursor=\(FleetDevice.escape($0))" } ?? ""
        http.send("GET", "/v1/pull\(query)", token: token) { [self] outcome in
            let answeredAt = MonotonicClock.now()
            guard phase != .failed else { return }
            switch outcome {
            case .answered(200, let body):
                retries = 0
                owner.pulls += 1
                do {
                    let page = try PullPage(body)
                    cursor = page.cursor
                    if let expected = owner.expected, gotAt == nil, owner.isExpected(index) {
                        seen.formUnion(page.keys(matching: expected))
                        if seen.count >= expected.rows { gotAt = answeredAt }
                    }
                    if page.hasMore { needsPull = true }
                } catch {
                    return fail("pull: \(error)")
                }
                if phase == .opening && !needsPull {
                    phase = .ready
                    owner.deviceSettled()
                }
                pump()
            case .answered(let status, let body):
                let code = FleetDevice.errorCode(body) ?? "status_\(status)"
                owner.countError("pull:\(code)")
                if code == "cursor_expired" {
                    cursor = nil
                    needsPull = true
                    pump()
                } else if status >= 500 || status == 429 {
                    retryLater()
                } else {
                    fail("pull answered \(status) \(code)")
                }
            case .failed(let reason):
                owner.countError("pull:transport:\(reason)")
                retryLater()
            }
        }
    }

    /// Pulls again as an app's sync engine would (FerryClient's default retry policy): after
    /// a random wait up to 0.5 s doubled per failure in a row, 60 s at most. A device never
    /// gives up on its own (the round's timeout ends the wait), but after 1,000 in a row.
    private func retryLater() {
        retries += 1
        guard retries <= 1000 else { return fail("pull failed \(retries - 1) times in a row") }
        waitingToRetry = true
        let ceiling = min(60_000, 500 * pow(2, Double(min(retries - 1, 30))))
        owner.loop.schedule(after: UInt64(Double.random(in: 0...ceiling))) { [self] in
            waitingToRetry = false
            guard phase != .failed else { return }
            needsPull = true
            pump()
        }
    }

    func fail(_ reason: String) {
        guard phase != .failed else { return }
        let wasOpening = phase == .opening
        phase = .failed
        needsPull = false
        owner.countFailure(reason)
        owner.closeStream(for: self)
        http.close()
        if wasOpening { owner.deviceSettled() }
    }
}

/// One event loop's share of a storm worker's devices: their stream sets (one per gateway
/// and transport), the bounded opening, the expectation and the figures. Loop thread only;
/// the worker reads it through ``EventLoop/runAndWait(_:)``.
final class StormLoop: @unchecked Sendable {
    let loop: EventLoop
    let servers: [SocketAddress]
    private let sourceBase: UInt32?
    private let devicesPerSource: Int
    private let maximumOpening: Int
    private var devices: [Int: StormDevice] = [:]
    private var toOpen: [StormDevice] = []
    private var nextToOpen = 0
    private var opening = 0
    private var streams = DeviceStreams()
    /// Called once when every device is ready or failed.
    var onSettled: (() -> Void)?

    /// What the devices wait for now, and which of them (nil: every one).
    private(set) var expected: ExpectedChange?
    private var expectedDevices: Set<Int>?
    /// Pull answers read (`200`) since the expectation was set.
    var pulls = 0
    /// Failed devices by reason, and errors by `pull:<code>`, since the start.
    private(set) var failures: [String: Int] = [:]
    private(set) var errors: [String: Int] = [:]

    init(
        loop: EventLoop, servers: [SocketAddress], sourceBase: UInt32?, devicesPerSource: Int, maximumOpening: Int
    ) {
        self.loop = loop
        self.servers = servers
        self.sourceBase = sourceBase
        self.devicesPerSource = max(1, devicesPerSource)
        self.maximumOpening = max(1, maximumOpening)
    }

    /// Makes a device for each `(index, token)` and opens them, `maximumOpening` at a time.
    func start(_ shares: [(index: Int, token: String)], webSocketShare: Double) {
        loop.preconditionInEventLoop()
        streams = DeviceStreams(
            loop: loop, servers: servers, opened: { [unowned self] in devices[$0]?.streamOpened() },
            cued: { [unowned self] in devices[$0]?.cued() }, ended: { [unowned self] in devices[$0]?.streamEnded() })
        for (index, token) in shares {
            // Device i is a WebSocket device when the share's running count steps up at i.
            let webSocket = Int(Double(index + 1) * webSocketShare) > Int(Double(index) * webSocketShare)
            let device = StormDevice(
                index: index, token: token, serverIndex: index % servers.count,
                transport: webSocket ? .webSocket : .serverSentEvents, owner: self)
            devices[index] = device
            toOpen.append(device)
        }
        if toOpen.isEmpty { onSettled?() }
        openMore()
    }

    private func openMore() {
        while opening < maximumOpening && nextToOpen < toOpen.count {
            opening += 1
            nextToOpen += 1
            toOpen[nextToOpen - 1].open()
        }
    }

    /// A device became ready or failed while opening.
    func deviceSettled() {
        opening -= 1
        openMore()
        if opening == 0 && nextToOpen == toOpen.count { onSettled?() }
    }

    /// The local address device `index` connects from: `devicesPerSource` devices (two connections each) per address.
    func source(for index: Int) -> SocketAddress? {
        sourceBase.flatMap { base in
            try? SocketAddress(host: StreamsWorker.dotted(base + UInt32(index / devicesPerSource)), port: 0)
        }
    }

    func openStream(for device: StormDevice) {
        streams.open(
            StreamOrder(index: device.index, token: device.token, source: source(for: device.index)),
            server: device.serverIndex, transport: device.transport)
    }

    func closeStream(for device: StormDevice) {
        streams.close(index: device.index)
    }

    func countError(_ key: String) { errors[key, default: 0] += 1 }

    /// The devices' errors, and their streams' (`stream:<why one did not open>`, `stream:dropped`).
    var allErrors: [String: Int] {
        errors.merging(streams.problems.map { ("stream:\($0.key)", $0.value) }, uniquingKeysWith: +)
    }
    func countFailure(_ reason: String) { failures[reason, default: 0] += 1 }

    /// From now on, devices (those of `indices`, or every one) wait for `change`; the pull count restarts.
    func expect(_ change: ExpectedChange, indices: Set<Int>?) {
        expected = change
        expectedDevices = indices
        pulls = 0
        for device in devices.values {
            device.seen = []
            device.gotAt = nil
        }
    }

    func isExpected(_ index: Int) -> Bool { expectedDevices?.contains(index) ?? true }

    /// `(devices that have the expected change, devices with a pull in flight or due, ready devices)`.
    var status: (got: Int, busy: Int, ready: Int) {
        var got = 0
        var busy = 0
        var ready = 0
        for device in devices.values where device.phase == .ready {
            ready += 1
            if device.gotAt != nil { got += 1 }
            if device.isBusy { busy += 1 }
        }
        return (got, busy, ready)
    }

    /// `(device index, monotonic ns)` for every device that has the expected change.
    var arrivals: [(index: Int, at: UInt64)] {
        devices.values.compactMap { device in device.gotAt.map { (device.index, $0) } }
    }

    func closeEverything() {
        streams.closeAll()
        for device in devices.values {
            device.phase = .failed
            device.http.close()
        }
    }
}
