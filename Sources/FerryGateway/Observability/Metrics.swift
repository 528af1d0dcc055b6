import FerryHTTP

/// Request and connection counters of one event loop. Loop thread only.
///
/// Each loop counts into its own instance, so the hot path takes no lock;
/// `/metrics` collects a ``MetricsSnapshot`` from every loop and merges them.
public final class LoopMetrics {
    /// Upper bounds of the request-duration histogram buckets, in seconds.
    public static let durationBuckets: [Double] = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
    ]

    private var snapshot = MetricsSnapshot()

    /// Empty counters.
    public init() {}

    /// Counts one answered request. `route` is the router's pattern, nil when no
    /// route matched (so unknown paths cannot blow up the label set).
    public func recordRequest(route: String?, status: Int, durationNanoseconds: UInt64) {
        let key = MetricsSnapshot.RouteStatus(route: route ?? "unmatched", status: status)
        snapshot.requests[key, default: 0] += 1
        // Mutated in place through the subscript: no copy of the bucket array per request.
        snapshot.durations[key.route, default: MetricsSnapshot.Histogram()]
            .observe(Double(durationNanoseconds) / 1_000_000_000)
    }

    /// Counts a connection opening.
    public func connectionOpened() {
        snapshot.openConnections += 1
        snapshot.acceptedConnections += 1
    }

    /// Counts a connection closing.
    public func connectionClosed() {
        snapshot.openConnections -= 1
    }

    /// Upper bounds of the cue latency histogram buckets, in seconds.
    public static let cueLatencyBuckets: [Double] = [
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1, 10,
    ]

    /// Counts a stream opening.
    public func streamOpened(_ transport: EventStreamTransport) {
        snapshot.openStreams[transport, default: 0] += 1
    }

    /// Counts a stream closing.
    public func streamClosed(_ transport: EventStreamTransport) {
        snapshot.openStreams[transport, default: 0] -= 1
    }

    /// Counts a cue sent to a stream, with the time from its (oldest) notification's arrival.
    public func cueSent(latencyNanoseconds: UInt64) {
        snapshot.cuesSent += 1
        snapshot.cueLatency.observe(Double(latencyNanoseconds) / 1_000_000_000)
    }

    /// Counts a cue merged into one a stream already owed.
    public func cueCoalesced() {
        snapshot.cuesCoalesced += 1
    }

    /// Counts a stream closed `4008 too_slow`.
    public func streamTooSlow() {
        snapshot.tooSlowCloses += 1
    }

    /// Counts a pull answered by `server`.
    public func pullServed(by server: ReadServer) {
        snapshot.pullsServed[server, default: 0] += 1
    }

    /// Counts a read a replica could have served that ran on the primary, and why.
    public func replicaFallback(_ reason: ReplicaFallback) {
        snapshot.replicaFallbacks[reason, default: 0] += 1
    }

    /// A copy of the counters, to hand to another thread.
    public func copy() -> MetricsSnapshot { snapshot }
}

/// A point-in-time copy of counters, mergeable across loops and printable in the
/// Prometheus text format.
public struct MetricsSnapshot: Sendable {
    /// A request counter's labels.
    public struct RouteStatus: Hashable, Sendable {
        /// The route pattern, or `unmatched`.
        public var route: String
        /// The HTTP status answered.
        public var status: Int
    }

    /// A cumulative histogram over fixed bucket bounds.
    public struct Histogram: Sendable {
        /// The buckets' upper bounds, seconds.
        public let bounds: [Double]
        /// Observations at or under each bucket's bound (not yet cumulative).
        public var counts: [Int]
        /// Every observation.
        public var count = 0
        /// The sum of observations, seconds.
        public var sum = 0.0

        /// An empty histogram over `bounds` (request durations by default).
        public init(bounds: [Double] = LoopMetrics.durationBuckets) {
            self.bounds = bounds
            counts = Array(repeating: 0, count: bounds.count)
        }

        mutating func observe(_ value: Double) {
            count += 1
            sum += value
            if let bucket = bounds.firstIndex(where: { value <= $0 }) { counts[bucket] += 1 }
        }

        mutating func merge(_ other: Histogram) {
            count += other.count
            sum += other.sum
            for index in counts.indices { counts[index] += other.counts[index] }
        }
    }

    /// Requests answered, by route and status.
    public var requests: [RouteStatus: Int] = [:]
    /// Request durations, by route.
    public var durations: [String: Histogram] = [:]
    /// Connections open now.
    public var openConnections = 0
    /// Connections accepted since start.
    public var acceptedConnections = 0
    /// Database pool connections checked out now.
    public var poolInUse = 0
    /// Database pool connections open and idle now.
    public var poolIdle = 0
    /// Requests waiting for a database connection now.
    public var poolWaiting = 0
    /// Streams open now, by transport.
    public var openStreams: [EventStreamTransport: Int] = [:]
    /// Cues written to streams.
    public var cuesSent = 0
    /// Cues merged into one a stream already owed (never sent on their own).
    public var cuesCoalesced = 0
    /// Streams closed `4008 too_slow`.
    public var tooSlowCloses = 0
    /// Notification received → cue bytes written.
    public var cueLatency = Histogram(bounds: LoopMetrics.cueLatencyBuckets)
    /// Pulls answered, by the database that served them.
    public var pullsServed: [ReadServer: Int] = [:]
    /// Reads (pulls, `/v1/schema`) sent to the primary although replicas are configured, by why.
    public var replicaFallbacks: [ReplicaFallback: Int] = [:]

    /// An empty snapshot.
    public init() {}

    /// Adds `other`'s counters to these.
    public mutating func merge(_ other: MetricsSnapshot) {
        requests.merge(other.requests, uniquingKeysWith: +)
        for (route, histogram) in other.durations {
            var merged = durations[route] ?? Histogram()
            merged.merge(histogram)
            durations[route] = merged
        }
        openConnections += other.openConnections
        acceptedConnections += other.acceptedConnections
        poolInUse += other.poolInUse
        poolIdle += other.poolIdle
        poolWaiting += other.poolWaiting
        openStreams.merge(other.openStreams, uniquingKeysWith: +)
        cuesSent += other.cuesSent
        cuesCoalesced += other.cuesCoalesced
        tooSlowCloses += other.tooSlowCloses
        cueLatency.merge(other.cueLatency)
        pullsServed.merge(other.pullsServed, uniquingKeysWith: +)
        replicaFallbacks.merge(other.replicaFallbacks, uniquingKeysWith: +)
    }

    /// The Prometheus text exposition (version 0.0.4) of these counters.
    public func prometheusText(listener: ListenerFigures) -> String {
        var out = ""
        out += "# HELP ferry_build_info Ferry version.\n# TYPE ferry_build_info gauge\n"
        out += "ferry_build_info{version=\"\(Ferry.version)\"} 1\n"
        out += "# HELP ferry_http_requests_total HTTP requests answered, by route and status.\n"
        out += "# TYPE ferry_http_requests_total counter\n"
        for (key, count) in requests.sorted(by: { ($0.key.route, $0.key.status) < ($1.key.route, $1.key.status) }) {
            out += "ferry_http_requests_total{route=\"\(key.route)\",status=\"\(key.status)\"} \(count)\n"
        }
        out += "# HELP ferry_http_request_duration_seconds Time from a request's last byte to its response.\n"
        out += "# TYPE ferry_http_request_duration_seconds histogram\n"
        for (route, histogram) in durations.sorted(by: { $0.key < $1.key }) {
            out += histogramLines("ferry_http_request_duration_seconds", labels: "route=\"\(route)\",", histogram)
        }
        out += gauge("ferry_http_open_connections", "HTTP connections open now.", openConnections)
        out += "# HELP ferry_http_connections_total HTTP connections accepted.\n"
        out += "# TYPE ferry_http_connections_total counter\nferry_http_connections_total \(acceptedConnections)\n"
        out += gauge("ferry_db_pool_in_use", "Database connections checked out by requests.", poolInUse)
        out += gauge("ferry_db_pool_idle", "Database connections open and idle.", poolIdle)
        out += gauge("ferry_db_pool_waiting", "Requests waiting for a database connection.", poolWaiting)
        out += gauge("ferry_listener_connected", "1 when the LISTEN connection is up.", listener.isConnected ? 1 : 0)
        out += counter(
            "ferry_listener_reconnects_total", "Times the LISTEN connection came back after a loss.",
            listener.reconnects)
        out += counter("ferry_cues_received_total", "ferry_cue notifications received.", listener.cuesReceived)
        out += "# HELP ferry_streams_open Streams open now, by transport.\n# TYPE ferry_streams_open gauge\n"
        for transport in EventStreamTransport.allCases {
            out += "ferry_streams_open{transport=\"\(transport.rawValue)\"} \(openStreams[transport] ?? 0)\n"
        }
        out += counter("ferry_cues_sent_total", "Cues written to streams.", cuesSent)
        out += counter(
            "ferry_cues_coalesced_total", "Cues merged into one a stream already owed.", cuesCoalesced)
        out += counter("ferry_stream_too_slow_total", "Streams closed 4008 too_slow.", tooSlowCloses)
        out += "# HELP ferry_cue_latency_seconds Notification received to cue written.\n"
        out += "# TYPE ferry_cue_latency_seconds histogram\n"
        out += histogramLines("ferry_cue_latency_seconds", labels: "", cueLatency)
        out += "# HELP ferry_pulls_total Pulls answered, by the database that served them.\n"
        out += "# TYPE ferry_pulls_total counter\n"
        for server in ReadServer.allCases {
            out += "ferry_pulls_total{served_by=\"\(server.rawValue)\"} \(pullsServed[server] ?? 0)\n"
        }
        out += "# HELP ferry_replica_fallbacks_total Reads run on the primary instead of a read replica, by why.\n"
        out += "# TYPE ferry_replica_fallbacks_total counter\n"
        for reason in ReplicaFallback.allCases {
            out += "ferry_replica_fallbacks_total{reason=\"\(reason.rawValue)\"} \(replicaFallbacks[reason] ?? 0)\n"
        }
        return out
    }

    private func histogramLines(_ name: String, labels: String, _ histogram: Histogram) -> String {
        var out = ""
        var cumulative = 0
        for (index, bound) in histogram.bounds.enumerated() {
            cumulative += histogram.counts[index]
            out += "\(name)_bucket{\(labels)le=\"\(bound)\"} \(cumulative)\n"
        }
        out += "\(name)_bucket{\(labels)le=\"+Inf\"} \(histogram.count)\n"
        let plain = labels.isEmpty ? "" : "{\(labels.dropLast())}"
        out += "\(name)_sum\(plain) \(histogram.sum)\n"
        out += "\(name)_count\(plain) \(histogram.count)\n"
        return out
    }

    private func counter(_ name: String, _ help: String, _ value: Int) -> String {
        "# HELP \(name) \(help)\n# TYPE \(name) counter\n\(name) \(value)\n"
    }

    private func gauge(_ name: String, _ help: String, _ value: Int) -> String {
        "# HELP \(name) \(help)\n# TYPE \(name) gauge\n\(name) \(value)\n"
    }
}

/// The process-wide listener figures `/metrics` prints beside the loops' counters.
public struct ListenerFigures: Sendable {
    /// Whether the LISTEN connection is up now.
    public var isConnected: Bool
    /// Times it came back after a loss.
    public var reconnects: Int
    /// `ferry_cue` notifications received.
    public var cuesReceived: Int

    /// Figures as given.
    public init(isConnected: Bool, reconnects: Int = 0, cuesReceived: Int = 0) {
        self.isConnected = isConnected
        self.reconnects = reconnects
        self.cuesReceived = cuesReceived
    }
}

/// What answered a read: the database it ran on, or (a pull whose only news was in
/// `shared` tables) the loop's memory of their changes (``SharedPulls``).
public enum ReadServer: String, CaseIterable, Sendable {
    case primary, replica
    case sharedCache = "shared_cache"
}

/// Why a read that could have run on a read replica ran on the primary.
public enum ReplicaFallback: String, CaseIterable, Sendable {
    /// The replica had not replayed what the read must see within `--replica-wait-ms`.
    case lag
    /// Only the primary could judge it: a cursor made before the primary last started, or
    /// a read database that is not a standby.
    case primaryOnly = "primary_only"
    /// The replica (or the primary's position) failed: refused, broken, a recovery conflict.
    case error
}
