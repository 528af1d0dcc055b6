extension Int {
    /// `self + other`, or the nearest bound when the sum does not fit: for sums with a
    /// value a client chose (a token's `exp`), which must never trap.
    public func saturatingAdd(_ other: Int) -> Int {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }

    /// `self * other`, or the nearest bound when the product does not fit.
    public func saturatingMultiply(_ other: Int) -> Int {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        guard overflow else { return product }
        return (self < 0) == (other < 0) ? .max : .min
    }
}
