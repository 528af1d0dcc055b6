/// Many deadlines on one loop behind one timer: a hashed timing wheel.
///
/// Each stream has one pending deadline (its next heartbeat, token warning or
/// expiry); the loop's timer calls ``advance(to:)`` every tick, which visits only the
/// slots whose time has come. Deadlines are loop milliseconds (`uv_now`).
///
/// An element has at most one deadline in the wheel: scheduling it again moves it, and
/// ``cancel(_:)`` takes it out at once, so the wheel never holds an element whose owner
/// is done with it (a closed stream). Each element remembers where its entry is
/// (``TimingWheelElement/wheelPosition``), which makes both O(1).
struct TimingWheel<Element: TimingWheelElement> {
    /// The wheel's resolution: deadlines fire up to this late.
    let tickMilliseconds: UInt64
    private var slots: [[(deadline: UInt64, element: Element)]]
    /// The last tick visited.
    private var visitedTick: UInt64
    /// Elements with a deadline in the wheel.
    private(set) var count = 0

    init(tickMilliseconds: UInt64, slotCount: Int, now: UInt64) {
        precondition(tickMilliseconds > 0 && slotCount > 0)
        self.tickMilliseconds = tickMilliseconds
        slots = Array(repeating: [], count: slotCount)
        visitedTick = now / tickMilliseconds
    }

    /// Hands `element` to the next ``advance(to:)`` that reaches `deadline`, in place of
    /// any deadline it had.
    mutating func schedule(_ element: Element, at deadline: UInt64) {
        cancel(element)
        let tick = max(deadline / tickMilliseconds + (deadline % tickMilliseconds == 0 ? 0 : 1), visitedTick + 1)
        let slot = Int(tick % UInt64(slots.count))
        element.wheelPosition = TimingWheelPosition(slot: slot, index: slots[slot].count)
        slots[slot].append((deadline, element))
        count += 1
    }

    /// Takes `element`'s deadline out of the wheel, which then no longer holds it.
    /// Nothing happens when it has none.
    mutating func cancel(_ element: Element) {
        guard let position = element.wheelPosition else { return }
        element.wheelPosition = nil
        let last = slots[position.slot].count - 1
        if position.index != last {
            // The slot's last entry takes the freed place.
            slots[position.slot].swapAt(position.index, last)
            slots[position.slot][position.index].element.wheelPosition = position
        }
        slots[position.slot].removeLast()
        // An emptied slot lets its storage go: a burst of streams that all closed again
        // would otherwise leave its capacity behind until the wheel came round.
        if slots[position.slot].isEmpty { slots[position.slot] = [] }
        count -= 1
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
                if entry.deadline <= now {
                    entry.element.wheelPosition = nil
                    due.append((entry.element, entry.deadline))
                } else {
                    entry.element.wheelPosition = TimingWheelPosition(slot: index, index: kept.count)
                    kept.append(entry)
                }
            }
            count -= slots[index].count - kept.count
            slots[index] = kept
        }
        visitedTick = nowTick
        return due
    }
}

/// What a ``TimingWheel`` holds: an object that remembers where its one entry is.
protocol TimingWheelElement: AnyObject {
    /// Where the element's entry is in its wheel, nil while it has none. Only the
    /// wheel sets it.
    var wheelPosition: TimingWheelPosition? { get set }
}

/// The place of an entry in a ``TimingWheel``: its slot and its index in the slot.
/// Stored in 32 bits each (every idle stream holds one); a slot holds far fewer than
/// 2³² entries, since each is an open stream.
struct TimingWheelPosition: Equatable {
    private let storedSlot: UInt32
    private let storedIndex: UInt32

    var slot: Int { Int(storedSlot) }
    var index: Int { Int(storedIndex) }

    init(slot: Int, index: Int) {
        storedSlot = UInt32(slot)
        storedIndex = UInt32(index)
    }
}
