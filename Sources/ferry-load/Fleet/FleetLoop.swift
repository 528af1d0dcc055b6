import FerryLoad
import FerryLoop
import Foundation

/// One event loop's share of the fleet: its devices, their streams (a set per gateway
/// and transport), the sign-up pace, and the figures since the last progress line.
/// Loop thread only; the command reads it through ``EventLoop/runAndWait(_:)``.
final class FleetLoop: @unchecked Sendable {
    static let password = "fleet-password-1"

    let loop: EventLoop
    let servers: [SocketAddress]
    let mix: FleetMix
    let tables: [String: SyncedTable]
    let runTag: String
    var random = SystemRandomNumberGenerator()
    var devices: [Int: FleetDevice] = [:]
    /// Devices to sign up on this loop, by index, in order.
    private var toSignUp: [Int]
    private var signedUp = 0
    private var nextCompanion: Int
    private let companionStride: Int
    private let signUpsPerSecond: Double
    private var started: UInt64 = 0
    private var ticker: FerryLoop.Timer?
    private var streams = DeviceStreams()
    private let sourceBase: (UInt8, UInt8)

    // Figures: the whole run's samples (ms) and the current second's.
    var samples: [String: [Double]] = [:]
    var window: [String: [Double]] = [:]
    var errors: [String: Int] = [:]
    var mutations = 0
    var failures: [String] = []

    init(
        loop: EventLoop, servers: [SocketAddress], mix: FleetMix, tables: [String: SyncedTable], runTag: String,
        devices: [Int], companionStart: Int, companionStride: Int, signUpsPerSecond: Double, sourceBase: (UInt8, UInt8)
    ) {
        self.loop = loop
        self.servers = servers
        self.mix = mix
        self.tables = tables
        self.runTag = runTag
        toSignUp = devices
        nextCompanion = companionStart
        self.companionStride = companionStride
        self.signUpsPerSecond = signUpsPerSecond
        self.sourceBase = sourceBase
    }

    /// Starts signing devices up at the loop's share of the rate, and the scheduler tick.
    func start() {
        loop.preconditionInEventLoop()
        streams = DeviceStreams(
            loop: loop, servers: servers, opened: { [unowned self] in devices[$0]?.streamOpened() },
            cued: { [unowned self] in devices[$0]?.cued() }, ended: { [unowned self] in devices[$0]?.streamEnded() })
        started = MonotonicClock.now()
        let timer = FerryLoop.Timer(loop: loop)
        timer.start(after: 10, repeat: 10) { [unowned self] in tick() }
        ticker = timer
    }

    private func tick() {
        let now = MonotonicClock.now()
        let due = min(toSignUp.count, Int(Double(now - started) / 1e9 * signUpsPerSecond) + 1)
        while signedUp < due {
            let index = toSignUp[signedUp]
            signedUp += 1
            let transport: StreamTransport =
                Double.random(in: 0..<1, using: &random) < mix.webSocketShare ? .webSocket : .serverSentEvents
            let device = FleetDevice(
                index: index, owner: self, serverIndex: index % servers.count, transport: transport)
            devices[index] = device
            device.signUp()
        }
        // Timed work (pushes, heartbeats, reconnects) at most every 50 ms per device.
        if (now / 10_000_000) % 5 == 0 {
            for device in devices.values { device.pump(now: now) }
        }
    }

    /// Signs a second device in to `device`'s account once it has an email.
    func addCompanion(of device: FleetDevice, email: String) {
        let index = nextCompanion
        nextCompanion += companionStride
        let transport: StreamTransport = device.transport == .webSocket ? .serverSentEvents : .webSocket
        let companion = FleetDevice(index: index, owner: self, serverIndex: index % servers.count, transport: transport)
        companion.companionOf = device
        devices[index] = companion
        companion.signIn(email: email)
    }

    /// Whether every device due has signed up and finished its first load.
    var allLoaded: Bool {
        signedUp == toSignUp.count && devices.values.allSatisfy { $0.loadedOnce || $0.phase == .failed }
    }

    /// The local address device `index` connects from: 20,000 devices per address (two connections each).
    func source(for index: Int) -> SocketAddress? {
        let block = index / 10_000
        return try? SocketAddress(host: "127.\(sourceBase.0).\(Int(sourceBase.1) &+ block & 0xff).1", port: 0)
    }

    func openStream(for device: FleetDevice) {
        streams.open(
            StreamOrder(index: device.index, token: device.token, source: source(for: device.index)),
            server: device.serverIndex, transport: device.transport)
    }

    func closeStream(for device: FleetDevice) {
        streams.close(index: device.index)
    }

    var streamsOpen: Int { devices.values.reduce(0) { $0 + ($1.streamOpen ? 1 : 0) } }

    // MARK: - Figures

    func record(_ operation: String, since start: UInt64) {
        let milliseconds = Double(MonotonicClock.now() - start) / 1e6
        samples[operation, default: []].append(milliseconds)
        window[operation, default: []].append(milliseconds)
    }

    func countError(_ key: String) { errors[key, default: 0] += 1 }

    func deviceFailed(_ device: FleetDevice, _ reason: String) {
        if failures.count < 50 { failures.append("device \(device.tag): \(reason)") }
    }

    /// An exponential gap after `now` for `perHour` events an hour (never when 0).
    func exponentialDelay(from now: UInt64, perHour: Double) -> UInt64 {
        guard perHour > 0 else { return .max }
        let u = Double.random(in: Double.ulpOfOne..<1, using: &random)
        let seconds = min(-log(u) * 3600 / perHour, 1e6)
        return now + UInt64(seconds * 1e9)
    }

    /// A random reconnect delay within the mix's jitter, in nanoseconds.
    func jitter() -> UInt64 {
        UInt64(Int.random(in: 0...max(0, mix.reconnectJitterMilliseconds), using: &random)) * 1_000_000
    }

    // MARK: - The end

    func stopAll() {
        ticker?.close()
        ticker = nil
        for device in devices.values { device.stop() }
    }

    /// Whether no device has work left. A failed device never runs again (its failure is
    /// reported), so whatever it still wanted (a pull a cue asked for) does not count.
    var allIdle: Bool {
        devices.values.allSatisfy { $0.phase == .failed || (!$0.isBusy && !$0.needsPull && $0.pendingBatch == nil) }
    }

    func finalPulls() { for device in devices.values { device.finalPull() } }

    func freeze() { for device in devices.values { device.freeze() } }

    func closeEverything() {
        streams.closeAll()
        for device in devices.values {
            device.phase = .idle
            device.http.close()
        }
    }
}
