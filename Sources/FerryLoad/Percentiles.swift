/// Order statistics of a sample, in the sample's unit.
public struct Percentiles: Equatable, Sendable {
    /// How many values.
    public var count: Int
    /// The median (nearest rank).
    public var p50: Double
    /// The 99th percentile (nearest rank).
    public var p99: Double
    /// The largest value.
    public var max: Double

    /// Summarises `values`; nil when there are none.
    public init?(_ values: [Double]) {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        count = sorted.count
        p50 = Self.nearestRank(sorted, 0.50)
        p99 = Self.nearestRank(sorted, 0.99)
        max = sorted[sorted.count - 1]
    }

    /// The value at percentile `fraction` by the nearest-rank method.
    static func nearestRank(_ sorted: [Double], _ fraction: Double) -> Double {
        let rank = Int((fraction * Double(sorted.count)).rounded(.up))
        return sorted[Swift.max(0, Swift.min(sorted.count - 1, rank - 1))]
    }
}
