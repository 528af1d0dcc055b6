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

    /// A cumulative histogram over ``LoopMetrics/durationBuckets``.
    public struct Histogram: Sendable {
        /// Observations at or under each bucket's bound (not yet cumulative).
        public var counts = [Int](repeating: 0, count: LoopMetrics.durationBuckets.count)
        /// Every observation.
        public var count = 0
        /// The sum of observations, seconds.
        public var sum = 0.0

        mutating func observe(_ value: Double) {
            count += 1
            sum += value
            if let bucket = LoopMetrics.durationBuckets.firstIndex(where: { value <= $0 }) { counts[bucket] += 1 }
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
    }

    /// The Prometheus text exposition (version 0.0.4) of these counters.
    public func prometheusText(listenerConnected: Bool) -> String {
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
            var cumulative = 0
            for (index, bound) in LoopMetrics.durationBuckets.enumerated() {
                cumulative += histogram.counts[index]
                out += "ferry_http_request_duration_seconds_bucket{route=\"\(route)\",le=\"\(bound)\"} \(cumulative)\n"
            }
            out += "ferry_http_request_duration_seconds_bucket{route=\"\(route)\",le=\"+Inf\"} \(histogram.count)\n"
            out += "ferry_http_request_duration_seconds_sum{route=\"\(route)\"} \(histogram.sum)\n"
            out += "ferry_http_request_duration_seconds_count{route=\"\(route)\"} \(histogram.count)\n"
        }
        out += gauge("ferry_http_open_connections", "HTTP connections open now.", openConnections)
        out += "# HELP ferry_http_connections_total HTTP connections accepted.\n"
        out += "# TYPE ferry_http_connections_total counter\nferry_http_connections_total \(acceptedConnections)\n"
        out += gauge("ferry_db_pool_in_use", "Database connections checked out by requests.", poolInUse)
        out += gauge("ferry_db_pool_idle", "Database connections open and idle.", poolIdle)
        out += gauge("ferry_db_pool_waiting", "Requests waiting for a database connection.", poolWaiting)
        out += gauge("ferry_listener_connected", "1 when the LISTEN connection is up.", listenerConnected ? 1 : 0)
        return out
    }

    private func gauge(_ name: String, _ help: String, _ value: Int) -> String {
        "# HELP \(name) \(help)\n# TYPE \(name) gauge\n\(name) \(value)\n"
    }
}
