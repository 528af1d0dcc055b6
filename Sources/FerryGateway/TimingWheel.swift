/// Many deadlines on one loop behind one timer: a hashed timing wheel.
///
/// Each stream has one pending deadline (its next heartbeat, token warning or
/// expiry); the loop's timer calls ``advance(to:_:)`` every tick, which visits only
/// the slots whose time has come. Deadlines are loop milliseconds (`uv_now`).
/// Entries are never removed: when an element's deadline changes it is scheduled
/// again, and ``advance(to:)`` hands out each entry with the deadline it was
/// scheduled for, so the owner ignores stale ones.
struct TimingWheel<Element: AnyObject> {
    /// The wheel's resolution: deadlines fire up to this late.
    let tickMilliseconds: UInt64
    private var slots: [[(deadline: UInt64, element: Element)]]
    /// The last tick visited.
    private var visitedTick: UInt64

    init(tickMilliseconds: UInt64, slotCount: Int, now: UInt64) {
        precondition(tickMilliseconds > 0 && slotCount > 0)
        self.tickMilliseconds = tickMilliseconds
        slots = Array(repeating: [], count: slotCount)
        visitedTick = now / tickMilliseconds
    }

    /// Entries waiting, stale ones included.
    var count: Int { slots.reduce(0) { $0 + $1.count } }

    /// Hands `element` to the next ``advance(to:_:)`` that reaches `deadline`.
    mutating func schedule(_ element: Element, at deadline: UInt64) {
        let tick = max(deadline / tickMilliseconds + (deadline % tickMilliseconds == 0 ? 0 : 1), visitedTick + 1)
        slots[Int(tick % UInt64(slots.count))].append((deadline, element))
    }

    /// Removes and returns every entry whose deadline is at or before `now` (returned,
    /// not called back, so the owner may schedule again while handling them).
    mutating func advance(to now: UInt64) -> [(element: Element, deadline: UInt64)] {
        let nowTick = now / tickMilliseconds
        guard nowTick > visitedTick else { return [] }
        // After a long stall every slot is visited once; the deadline check does the rest.
        let steps = min(nowTick - visitedTick, UInt64(slots.count))
        var due: [(element: Element, deadline: UInt64)] = []
        for step in 1...steps {
            let index = Int((visitedTick + step) % UInt64(slots.count))
            guard !slots[index].isEmpty else { continue }
            var kept: [(deadline: UInt64, element: Element)] = []
            for entry in slots[index] {
                if entry.deadline <= now { due.append((entry.element, entry.deadline)) } else { kept.append(entry) }
            }
            slots[index] = kept
        }
        visitedTick = nowTick
        return due
    }
}
