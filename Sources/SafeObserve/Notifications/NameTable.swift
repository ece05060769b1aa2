/// A hub's unfiltered channels, by name identity: open addressing, linear
/// probing, backward-shift deletion (no tombstones).
///
/// Why not ``_AddressTable``: a post looks its name up on every call, and
/// name identities are small integers, not addresses. The slot a probe
/// starts at is one multiplication and one shift by a width kept here
/// (Fibonacci hashing), a few instructions fewer than the address table's,
/// which derives its width from the capacity on each look-up. Why not an
/// array indexed by identity: identities are the process's, so such an
/// array grows with every name the process ever made, whichever hub
/// observes it.
///
/// Starts empty, without storage; grows at 3/4 load; shrinks below 1/8
/// load past 16 slots, so memory follows the channels.
struct _NameTable {
    struct Slot {
        var nameID: Int
        /// `nil`: an empty slot.
        var channel: _Channel?
    }

    private var slots: ContiguousArray<Slot> = []
    /// 64 minus log2 of the capacity: the product's top bits index a slot.
    private var shift = 64
    private(set) var count = 0

    init() {}

    /// The slots (tests: memory follows the channels).
    var capacity: Int { slots.count }

    /// The slot where probing for `nameID` starts.
    @inline(__always)
    private static func home(of nameID: Int, shift: Int) -> Int {
        Int(bitPattern: (UInt(bitPattern: nameID) &* 0x9E37_79B9_7F4A_7C15) &>> UInt(bitPattern: shift))
    }

    // MARK: Queries

    /// The channel of `nameID`, borrowed: valid while the table is not
    /// changed (the caller holds the hub's lock).
    ///
    /// - Complexity: O(1) expected.
    @inline(__always)
    func borrowedChannel(_ nameID: Int) -> Unmanaged<_Channel>? {
        guard count > 0 else { return nil }
        return slots.withUnsafeBufferPointer { slots in
            let base = slots.baseAddress.unsafelyUnwrapped
            var index = Self.home(of: nameID, shift: shift)
            while true {
                // A bitwise copy of the slot's reference, without a retain.
                let raw = UnsafeRawPointer(base + index)
                guard
                    let channel = raw.load(
                        fromByteOffset: MemoryLayout<Slot>.offset(of: \Slot.channel).unsafelyUnwrapped,
                        as: Unmanaged<_Channel>?.self)
                else { return nil }
                if raw.load(as: Int.self) == nameID { return channel }
                index = (index &+ 1) & (slots.count &- 1)
            }
        }
    }

    /// The channel of `nameID`.
    ///
    /// - Complexity: O(1) expected.
    func channel(_ nameID: Int) -> _Channel? {
        borrowedChannel(nameID)?.takeUnretainedValue()
    }

    /// Every channel with its name, in no particular order.
    ///
    /// - Complexity: O(capacity).
    var elements: [(nameID: Int, channel: _Channel)] {
        slots.compactMap { slot in slot.channel.map { (slot.nameID, $0) } }
    }

    // MARK: Mutations

    /// Files `channel` as `nameID`'s (which has none).
    ///
    /// - Complexity: Amortized O(1) expected.
    mutating func insert(_ channel: _Channel, for nameID: Int) {
        defer { _checkInvariantsIfSmall() }
        if (count + 1) * 4 > slots.count * 3 { rehash(capacity: Swift.max(8, slots.count * 2)) }
        var index = Self.home(of: nameID, shift: shift)
        while slots[index].channel != nil { index = (index + 1) & (slots.count - 1) }
        slots[index] = Slot(nameID: nameID, channel: channel)
        count += 1
    }

    /// Removes and returns `nameID`'s channel (to release unlocked).
    ///
    /// - Complexity: O(1) expected.
    @discardableResult
    mutating func remove(_ nameID: Int) -> _Channel? {
        guard count > 0 else { return nil }
        let mask = slots.count - 1
        var index = Self.home(of: nameID, shift: shift)
        while let channel = slots[index].channel {
            if slots[index].nameID == nameID {
                removeSlot(index, mask: mask)
                if slots.count > 16, count * 8 < slots.count {
                    rehash(capacity: Swift.max(16, (count * 2).roundedUpToPowerOfTwo))
                }
                _checkInvariantsIfSmall()
                return channel
            }
            index = (index + 1) & mask
        }
        return nil
    }

    /// Empties `hole`, moving later slots of its probe run back so that
    /// every channel stays reachable from its home slot.
    private mutating func removeSlot(_ hole: Int, mask: Int) {
        count -= 1
        var hole = hole
        var next = (hole + 1) & mask
        while slots[next].channel != nil {
            let home = Self.home(of: slots[next].nameID, shift: shift)
            // Movable if the hole lies, cyclically, in [home, next).
            let movable = next > hole ? (home <= hole || home > next) : (home <= hole && home > next)
            if movable {
                slots[hole] = slots[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        slots[hole] = Slot(nameID: 0, channel: nil)
    }

    private mutating func rehash(capacity: Int) {
        let old = slots
        slots = ContiguousArray(repeating: Slot(nameID: 0, channel: nil), count: capacity)
        shift = Int.bitWidth - capacity.trailingZeroBitCount
        count = 0
        for slot in old {
            if let channel = slot.channel { insert(channel, for: slot.nameID) }
        }
    }

    // MARK: Invariants

    @inline(__always)
    private func _checkInvariantsIfSmall() {
        #if SAFEOBSERVE_INTERNAL_CHECKS
            if slots.count <= 64 { _checkInvariants() }
        #endif
    }

    /// Checks that every channel is reachable from its home slot, names
    /// are unique, and `count` matches (tests and `_checkInvariants`).
    func _checkInvariants() {
        var seen = Set<Int>()
        for (index, slot) in slots.enumerated() where slot.channel != nil {
            precondition(seen.insert(slot.nameID).inserted, "_NameTable: a name filed twice")
            var probe = Self.home(of: slot.nameID, shift: shift)
            while probe != index {
                precondition(slots[probe].channel != nil, "_NameTable: a channel unreachable from its home slot")
                probe = (probe + 1) & (slots.count - 1)
            }
        }
        precondition(seen.count == count, "_NameTable: count \(count) but \(seen.count) channels")
        precondition(slots.isEmpty || slots.count & (slots.count - 1) == 0, "_NameTable: capacity not a power of 2")
    }
}

extension Int {
    /// The smallest power of two not less than `self` (1 for 0 and 1).
    fileprivate var roundedUpToPowerOfTwo: Int {
        self <= 1 ? 1 : 1 << (Int.bitWidth - (self - 1).leadingZeroBitCount)
    }
}
