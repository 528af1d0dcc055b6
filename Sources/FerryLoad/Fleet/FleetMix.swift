import Foundation

/// What a simulated fleet does, read from a JSON file a user edits (bench/README.md,
/// "ferry-load fleet"). Every field has a default; ``puzzle`` and ``tasks`` model the
/// two example apps (sql/examples/).
public struct FleetMix: Codable, Equatable, Sendable {
    /// The example app the gateway serves: `puzzle` or `tasks`.
    public var app: String
    /// Devices that sign up anonymously, in total.
    public var devices: Int
    /// Anonymous sign-ups a second, across the fleet.
    public var signUpsPerSecond: Double
    /// The share of devices whose stream is a WebSocket (the rest use Server-Sent Events).
    public var webSocketShare: Double
    /// The share of signed-up devices that link an email and sign a second device in.
    public var linkedShare: Double
    /// Pushes a device sends a minute, on average (exponential gaps).
    public var pushesPerDeviceMinute: Double
    /// Mutations per push, with weights.
    public var batchSizes: [Weighted<Int>]
    /// Which mutation each slot of a push is, with weights.
    public var operations: [Weighted<FleetOperation>]
    /// Stream reconnects a device makes an hour, on average.
    public var reconnectsPerDeviceHour: Double
    /// The largest random delay before a reconnect, in milliseconds.
    public var reconnectJitterMilliseconds: Int
    /// Sign-outs (then a sign-in on the same device) a linked device makes an hour.
    public var signOutsPerDeviceHour: Double
    /// Seconds between heartbeats while a device holds the `active_game` lock (puzzle).
    public var lockHeartbeatSeconds: Double

    /// The puzzle example: profiles and settings (lww), game records (insert-only),
    /// achievements (set), the active game under its device lock.
    public static let puzzle = FleetMix(
        app: "puzzle", devices: 1000, signUpsPerSecond: 200, webSocketShare: 0.5, linkedShare: 0.1,
        pushesPerDeviceMinute: 6, batchSizes: [.init(1, 70), .init(3, 20), .init(20, 9), .init(100, 1)],
        operations: [
            .init(.profileUpsert, 10), .init(.settingsUpsert, 10), .init(.gameRecordInsert, 40),
            .init(.achievementAdd, 15), .init(.achievementRemove, 5), .init(.activeGameUpdate, 20),
        ], reconnectsPerDeviceHour: 6, reconnectJitterMilliseconds: 2000, signOutsPerDeviceHour: 2,
        lockHeartbeatSeconds: 10)

    /// The tasks example: a tree of tasks (lww), upserted and deleted.
    public static let tasks = FleetMix(
        app: "tasks", devices: 1000, signUpsPerSecond: 200, webSocketShare: 0.5, linkedShare: 0.1,
        pushesPerDeviceMinute: 6, batchSizes: [.init(1, 70), .init(5, 25), .init(50, 5)],
        operations: [.init(.taskUpsert, 80), .init(.taskDelete, 20)], reconnectsPerDeviceHour: 6,
        reconnectJitterMilliseconds: 2000, signOutsPerDeviceHour: 2, lockHeartbeatSeconds: 10)

    /// The default mix of `app`, nil for an unknown app.
    public static func defaults(for app: String) -> FleetMix? {
        switch app {
        case "puzzle": puzzle
        case "tasks": tasks
        default: nil
        }
    }

    /// Reads a mix file: any field left out takes the default of the file's `app` (puzzle when absent).
    public init(json: Data) throws {
        let object = try JSONSerialization.jsonObject(with: json)
        guard var fields = object as? [String: Any] else { throw FleetMixError("a mix file is one JSON object") }
        let app = fields["app"] as? String ?? "puzzle"
        guard let base = Self.defaults(for: app) else { throw FleetMixError("unknown app \(app): puzzle or tasks") }
        let defaults = try JSONSerialization.jsonObject(with: JSONEncoder().encode(base)) as! [String: Any]
        for (name, value) in defaults where fields[name] == nil { fields[name] = value }
        let known = Set(defaults.keys)
        if let unknown = fields.keys.first(where: { !known.contains($0) }) {
            throw FleetMixError("unknown field \(unknown)")
        }
        self = try JSONDecoder().decode(FleetMix.self, from: JSONSerialization.data(withJSONObject: fields))
        try validate()
    }

    /// Creates a mix from every field.
    public init(
        app: String, devices: Int, signUpsPerSecond: Double, webSocketShare: Double, linkedShare: Double,
        pushesPerDeviceMinute: Double, batchSizes: [Weighted<Int>], operations: [Weighted<FleetOperation>],
        reconnectsPerDeviceHour: Double, reconnectJitterMilliseconds: Int, signOutsPerDeviceHour: Double,
        lockHeartbeatSeconds: Double
    ) {
        self.app = app
        self.devices = devices
        self.signUpsPerSecond = signUpsPerSecond
        self.webSocketShare = webSocketShare
        self.linkedShare = linkedShare
        self.pushesPerDeviceMinute = pushesPerDeviceMinute
        self.batchSizes = batchSizes
        self.operations = operations
        self.reconnectsPerDeviceHour = reconnectsPerDeviceHour
        self.reconnectJitterMilliseconds = reconnectJitterMilliseconds
        self.signOutsPerDeviceHour = signOutsPerDeviceHour
        self.lockHeartbeatSeconds = lockHeartbeatSeconds
    }

    /// Every value within the range the fleet can run.
    public func validate() throws {
        func check(_ ok: Bool, _ message: String) throws { if !ok { throw FleetMixError(message) } }
        try check((0...1_000_000).contains(devices), "devices: 0...1000000")
        try check(signUpsPerSecond > 0 && signUpsPerSecond <= 100_000, "signUpsPerSecond: above 0, at most 100000")
        try check((0...1).contains(webSocketShare), "webSocketShare: 0...1")
        try check((0...1).contains(linkedShare), "linkedShare: 0...1")
        try check(pushesPerDeviceMinute >= 0 && pushesPerDeviceMinute <= 6000, "pushesPerDeviceMinute: 0...6000")
        try check(
            !batchSizes.isEmpty && batchSizes.allSatisfy { (1...1000).contains($0.value) && $0.weight > 0 },
            "batchSizes: sizes 1...1000, weights above 0")
        try check(!operations.isEmpty && operations.allSatisfy { $0.weight > 0 }, "operations: weights above 0")
        let allowed = FleetOperation.allCases.filter { $0.app == app }
        try check(
            operations.allSatisfy { allowed.contains($0.value) }, "operations: \(app) has \(allowed.map(\.rawValue))")
        try check(reconnectsPerDeviceHour >= 0 && reconnectsPerDeviceHour <= 3600, "reconnectsPerDeviceHour: 0...3600")
        try check((0...600_000).contains(reconnectJitterMilliseconds), "reconnectJitterMilliseconds: 0...600000")
        try check(signOutsPerDeviceHour >= 0 && signOutsPerDeviceHour <= 3600, "signOutsPerDeviceHour: 0...3600")
        try check(lockHeartbeatSeconds >= 1 && lockHeartbeatSeconds <= 25, "lockHeartbeatSeconds: 1...25")
    }
}

/// A mix file that cannot run, and why.
public struct FleetMixError: Error, CustomStringConvertible {
    public let description: String
    /// The reason, one line.
    public init(_ description: String) { self.description = description }
}

/// A value and its weight in a random choice.
public struct Weighted<Value: Codable & Equatable & Sendable>: Codable, Equatable, Sendable {
    /// The value chosen.
    public var value: Value
    /// Its weight (any positive number; the weights need not sum to anything).
    public var weight: Double

    /// Pairs `value` with `weight`.
    public init(_ value: Value, _ weight: Double) {
        self.value = value
        self.weight = weight
    }
}

extension Array {
    /// One value at random, in proportion to the weights.
    public func pick<Value, R: RandomNumberGenerator>(using random: inout R) -> Value
    where Element == Weighted<Value> {
        let total = reduce(0) { $0 + $1.weight }
        var point = Double.random(in: 0..<total, using: &random)
        for entry in self {
            if point < entry.weight { return entry.value }
            point -= entry.weight
        }
        return self[count - 1].value
    }
}

/// One kind of mutation a device pushes, named for the example table and strategy it exercises.
public enum FleetOperation: String, Codable, CaseIterable, Sendable {
    /// `profiles` upsert (lww): the username.
    case profileUpsert = "profile_upsert"
    /// `user_settings` upsert (lww).
    case settingsUpsert = "settings_upsert"
    /// `game_records` insert (insert-only), an id of the device's own.
    case gameRecordInsert = "game_record_insert"
    /// `achievements` insert (set), from a small pool so devices of one user collide.
    case achievementAdd = "achievement_add"
    /// `achievements` delete (set).
    case achievementRemove = "achievement_remove"
    /// `active_game` upsert under the device lock (claimed first, heartbeats while held).
    case activeGameUpdate = "active_game_update"
    /// `tasks` upsert (lww), a task of the device's own.
    case taskUpsert = "task_upsert"
    /// `tasks` delete (lww tombstone) of one of the device's tasks.
    case taskDelete = "task_delete"

    /// The example app whose tables the operation writes.
    public var app: String {
        switch self {
        case .taskUpsert, .taskDelete: "tasks"
        default: "puzzle"
        }
    }
}
