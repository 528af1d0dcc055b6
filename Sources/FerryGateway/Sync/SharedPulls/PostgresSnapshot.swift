/// A PostgreSQL snapshot (`pg_snapshot`) read from its text form, `xmin:xmax:xip,…`, and
/// `pg_visible_in_snapshot` in Swift: which transactions' writes it sees.
///
/// Pull cursors are snapshots (sql/ferry/functions/pull.sql), and a row's `_stamp` is the
/// id of the transaction that last wrote it, so this answers, without PostgreSQL, whether
/// a cursor has seen a row or a cued change (``SharedChangeCache``).
struct PostgresSnapshot: Equatable, Sendable {
    /// Every transaction below this id had ended when the snapshot was taken.
    let xmin: UInt64
    /// No transaction from this id on had begun.
    let xmax: UInt64
    /// The transactions from `xmin` to below `xmax` still running then, ascending.
    let running: [UInt64]
    /// The text it was read from, as PostgreSQL writes it.
    let text: String

    /// The snapshot `text` names, or nil when it is not one PostgreSQL would write
    /// (`xmin ≤ xmax`, the running ids ascending and within them).
    init?(_ text: String) {
        let parts = text.utf8.split(separator: UInt8(ascii: ":"), omittingEmptySubsequences: false)
        guard parts.count == 3, let xmin = Self.xid(parts[0]), let xmax = Self.xid(parts[1]), xmin <= xmax else {
            return nil
        }
        var running: [UInt64] = []
        if !parts[2].isEmpty {
            for part in parts[2].split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
                guard let xid = Self.xid(part), xid >= xmin, xid < xmax, running.last.map({ xid > $0 }) ?? true
                else { return nil }
                running.append(xid)
            }
        }
        self.xmin = xmin
        self.xmax = xmax
        self.running = running
        self.text = text
    }

    /// Whether the writes of transaction `xid` are visible in this snapshot, as
    /// `pg_visible_in_snapshot(xid, snapshot)` answers for a transaction that committed.
    func isVisible(_ xid: UInt64) -> Bool {
        if xid < xmin { return true }
        if xid >= xmax { return false }
        var low = 0
        var high = running.count
        while low < high {
            let middle = (low + high) / 2
            if running[middle] < xid { low = middle + 1 } else { high = middle }
        }
        return low == running.count || running[low] != xid
    }

    /// Whether every transaction whose writes `earlier` sees is seen here too: whether this
    /// snapshot has seen at least everything `earlier` had. Exact, whatever else ran
    /// meanwhile: a transaction `earlier` sees had committed, so this one sees it unless it
    /// still lists it as running (or begins before it).
    func sees(everythingOf earlier: PostgresSnapshot) -> Bool {
        guard xmax >= earlier.xmax else { return false }
        for xid in running where xid < earlier.xmax && earlier.isVisible(xid) { return false }
        return true
    }

    /// A transaction id in decimal, at most 20 digits (an `xid8`); nil otherwise.
    static func xid(_ digits: some Collection<UInt8>) -> UInt64? {
        guard !digits.isEmpty, digits.count <= 20 else { return nil }
        var value: UInt64 = 0
        for digit in digits {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(digit) else { return nil }
            let (times, overflowTimes) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflowSum) = times.addingReportingOverflow(UInt64(digit - UInt8(ascii: "0")))
            guard !overflowTimes, !overflowSum else { return nil }
            value = sum
        }
        return value
    }
}
