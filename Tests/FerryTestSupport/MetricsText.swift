/// A counter or gauge of a `/metrics` answer's text (Prometheus' text format), summed
/// over its series with `labels` (`route="/healthz",status="200"`), or over all of its
/// series when `labels` is nil.
public func metricTotal(_ name: String, labels: String? = nil, in text: String) -> Int {
    var total = 0
    for line in text.split(separator: "\n") where !line.hasPrefix("#") {
        let parts = line.split(separator: " ")
        guard parts.count == 2 else { continue }
        let series = parts[0]
        let matches = labels.map { series == "\(name){\($0)}" } ?? (series == name || series.hasPrefix(name + "{"))
        if matches, let value = Double(parts[1]) { total += Int(value) }
    }
    return total
}
