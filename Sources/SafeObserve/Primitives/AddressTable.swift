import Synchronization

/// Something stored in an ``_AddressTable``, under an object's identity.
protocol _AddressKeyed {
    /// The identity the element is filed under (several elements may share it).
    var tableKey: ObjectIdentifier { get }
}

/// A hash table keyed by object identity: open addressing, linear probing,
/// backward-shift deletion (no tombstones).
///
/// Why not `Dictionary<ObjectIdentifier, [Element]>`: registering and removing
/// a relation would hash with SipHash and allocate a list per key, about a
/// third of what an observation costs. An address only needs a multiplicative
/// hash, and elements sharing a key simply sit in neighbouring slots.
/// Starts empty, without storage; grows at 3/4 load; shrinks below 1/8 load
/// past 16 slots, so memory follows the live elements after a peak (a
/// listener that observes and unobserves in a loop never reallocates: a
/// small table never shrinks).
///
/// Each storage allocation hashes with a salt of its own (see ``salt``).
///
/// A table that never held more than one element at a time keeps it in
/// ``single``, without storage: most listeners observe one property, and
/// most objects have one observed property, so their tables cost no
/// allocation (and no freeing when they die). The second element moves both
/// into slots, which are then kept as any table's.
///
/// Elements filed under one key are visited in the order they were filed:
/// an insertion takes the first free slot after its key's others, a removal
/// shifts later elements back without passing one another, and a rehash
/// re-files every probe run from its start (``_SentinelIndex`` relies on it
/// for the order of an object's observed properties).
struct _AddressTable<Element: _AddressKeyed> {
    private var slots: ContiguousArray<Element?> = []
    /// The element of a table without storage (then `count` is 0 or 1);
    /// always `nil` once the table has slots.
    private var single: Element?
    /// The elements filed. Stored in 32 bits beside the 32-bit ``salt``,
    /// so that the salt costs no word of its own in every table (a table
    /// of 2^32 elements would need hundreds of gigabytes first).
    private var storedCount: UInt32 = 0
    private(set) var count: Int {
        get { Int(storedCount) }
        // Unchecked: the count never exceeds the slots, and 2^32 slots
        // would take 64 GB before the table could hold that many.
        set { storedCount = UInt32(truncatingIfNeeded: newValue) }
    }
    /// Mixed into every key's hash, and drawn anew at each rehash: without
    /// it, elements removed in the slot order of another table of the same
    /// keys (a hub's channels ending their listeners' relations), or a
    /// shrink after removals in this table's own order, leave the remaining
    /// elements' homes in one region, and probing becomes one run as long as
    /// the table (each removal O(*n*)).
    private var salt: UInt32 = 0

    init() {}

    var isEmpty: Bool { count == 0 }

    private var mask: Int { slots.count - 1 }

    /// The slot where probing for `key` starts.
    private func home(of key: ObjectIdentifier) -> Int {
        // Heap objects are 16-byte aligned: drop the bits that never vary,
        // salt, then spread the rest (Fibonacci hashing).
        // The top log2(capacity) bits of the product (`mask` is capacity - 1;
        // for a single slot, no bits: the `& mask` makes it 0).
        _fibonacciHash((UInt(bitPattern: key) &>> 4) ^ UInt(salt), bits: Int.bitWidth - mask.leadingZeroBitCount) & mask
    }

    // MARK: Queries

    /// Calls `body` with each element filed under `key`, in the order they
    /// were filed, until it returns `false`.
    ///
    /// Probes in place: elements are lent to `body`, never copied out (a copy
    /// would retain their references).
    ///
    /// - Complexity: O(1) expected.
    func forEach(under key: ObjectIdentifier, _ body: (borrowing Element) -> Bool) {
        guard count > 0 else { return }
        guard !slots.isEmpty else {
            if single!.tableKey == key { _ = body(single!) }
            return
        }
        slots.withUnsafeBufferPointer { slots in
            let mask = slots.count - 1
            var index = home(of: key)
            while let slot = Optional(slots.baseAddress! + index), slot.pointee != nil {
                if slot.pointee!.tableKey == key, !body(slot.pointee!) { return }
                index = (index + 1) & mask
            }
        }
    }

    /// The value `project` gives for the first element filed under `key`
    /// for which it gives one.
    ///
    /// - Complexity: O(1) expected.
    func first<Projection>(under key: ObjectIdentifier, _ project: (borrowing Element) -> Projection?) -> Projection? {
        var found: Projection?
        forEach(under: key) { element in
            found = project(element)
            return found == nil
        }
        return found
    }

    /// The first element filed under `key` that satisfies `predicate`.
    ///
    /// - Complexity: O(1) expected.
    func first(under key: ObjectIdentifier, where predicate: (Element) -> Bool) -> Element? {
        first(under: key) { element in predicate(element) ? copy element : nil }
    }

    /// Every element, in no particular order.
    ///
    /// - Complexity: O(capacity).
    var elements: [Element] {
        slots.isEmpty ? single.map { [$0] } ?? [] : slots.compactMap { $0 }
    }

    /// The element in `slot`, if any (for round-robin sweeps).
    ///
    /// - Complexity: O(1).
    func element(inSlot slot: Int) -> Element? {
        if slots.isEmpty { return slot == 0 ? single : nil }
        return slot < slots.count ? slots[slot] : nil
    }

    /// Whether the table has slots, rather than at most ``single`` (tests).
    var hasStorage: Bool { !slots.isEmpty }

    /// The number of slots (for round-robin sweeps; ``single`` counts as
    /// one).
    var capacity: Int { slots.isEmpty ? count : slots.count }

    // MARK: Mutations

    /// Files `element` under its key.
    ///
    /// - Complexity: Amortized O(1) expected.
    mutating func insert(_ element: consuming Element) {
        defer { _checkInvariantsIfSmall() }
        if slots.isEmpty {
            guard count > 0 else {
                single = element
                count = 1
                return
            }
            // The second element: both go into slots (4, as two elements
            // need at 3/4 load).
            rehash(capacity: 4)
        } else if (count + 1) * 4 > slots.count * 3 {
            grow()
        }
        var index = home(of: element.tableKey)
        while slots[index] != nil {
            index = (index + 1) & mask
        }
        slots[index] = element
        count += 1
    }

    /// Removes and returns the first element filed under `key` that satisfies
    /// `predicate`.
    ///
    /// - Complexity: O(1) expected.
    @discardableResult
    mutating func remove(under key: ObjectIdentifier, where predicate: (Element) -> Bool) -> Element? {
        guard count > 0 else { return nil }
        if slots.isEmpty {
            guard single!.tableKey == key, predicate(single!) else { return nil }
            count = 0
            return single.take()
        }
        var index = home(of: key)
        while let element = slots[index] {
            if element.tableKey == key, predicate(element) {
                removeSlot(index)
                if slots.count > 16, count * 8 < slots.count { shrink() }
                _checkInvariantsIfSmall()
                return element
            }
            index = (index + 1) & mask
        }
        return nil
    }

    /// Removes and returns the elements for which `shouldRemove` returns
    /// `true`; see ``removeAll(where:take:)``.
    ///
    /// - Complexity: O(capacity).
    mutating func removeAll(where shouldRemove: (inout Element) -> Bool) -> [Element] {
        var removed: [Element] = []
        removeAll(where: shouldRemove) { removed.append($0) }
        return removed
    }

    /// Removes the elements for which `shouldRemove` returns `true`, handing
    /// each to `take`, and keeps the order of those that stay under each
    /// key. Each element is lent to `shouldRemove` in place, `inout`, so
    /// that it can check `isKnownUniquelyReferenced` on a reference it holds
    /// (a copy would retain it). Gives the storage back when the table
    /// empties, and shrinks it below 1/8 load.
    ///
    /// - Complexity: O(capacity).
    mutating func removeAll(where shouldRemove: (inout Element) -> Bool, take: (consuming Element) -> Void) {
        guard count > 0 else { return }
        if slots.isEmpty {
            guard shouldRemove(&single!) else { return }
            count = 0
            take(single.take()!)
            return
        }
        // An empty slot before anything is removed: re-filing from right
        // after it keeps the order under each key (see `rehash`).
        let start = slots.firstIndex { $0 == nil }
        var removedCount = 0
        slots.withUnsafeMutableBufferPointer { slots in
            for index in slots.indices where slots[index] != nil {
                if shouldRemove(&slots[index]!) {
                    take(slots[index].take()!)
                    removedCount += 1
                }
            }
        }
        guard removedCount > 0 else { return }
        let remaining = count - removedCount
        guard remaining > 0 else {
            slots = []
            count = 0
            return
        }
        let capacity =
            slots.count > 16 && remaining * 8 < slots.count
            ? Swift.max(16, (remaining * 2).nextPowerOfTwo) : slots.count
        // The holes broke probe runs: every element is filed again.
        count = remaining
        refile(capacity: capacity, startingAfter: start)
    }

    /// Removes every element and gives the storage back.
    ///
    /// - Complexity: O(capacity).
    mutating func removeAll() -> [Element] {
        defer {
            slots = []
            single = nil
            count = 0
        }
        return elements
    }

    /// Empties `hole`, moving later elements of its probe run back so that
    /// every element stays reachable from its home slot.
    private mutating func removeSlot(_ hole: Int) {
        count -= 1
        var hole = hole
        var next = (hole + 1) & mask
        while let element = slots[next] {
            let homeSlot = home(of: element.tableKey)
            // `element` may fill the hole if the hole lies, cyclically, in
            // [homeSlot, next): probing from homeSlot reaches the hole before next.
            let movable = next > hole ? (homeSlot <= hole || homeSlot > next) : (homeSlot <= hole && homeSlot > next)
            if movable {
                slots[hole] = element
                hole = next
            }
            next = (next + 1) & mask
        }
        slots[hole] = nil
    }

    private mutating func grow() {
        rehash(capacity: slots.count * 2)
    }

    /// Halves the load to about 1/2: amortized O(1), since 3/4 of the
    /// elements must go before the next shrink.
    @inline(never)
    private mutating func shrink() {
        rehash(capacity: Swift.max(16, (count * 2).nextPowerOfTwo))
    }

    /// Re-files every element in a table of `capacity` slots, keeping the
    /// order of the elements filed under each key.
    ///
    /// Elements under one key sit in one probe run, in the order they were
    /// filed, and a run may wrap past the last slot. Re-inserting from slot
    /// 0 would file a wrapped run's tail before its head; starting right
    /// after an empty slot (one always exists: the load stays under 3/4)
    /// and wrapping around visits every run from its start.
    private mutating func rehash(capacity: Int) {
        refile(capacity: capacity, startingAfter: slots.firstIndex { $0 == nil })
    }

    /// Files every element again in `capacity` slots, visiting the old
    /// slots from right after `empty` (a slot that was empty before any
    /// element was removed; `nil` for a table without storage), round.
    /// Elements are moved, not copied (no reference counting), and the
    /// visit stops at the last one (a table emptied by removals re-files
    /// nothing): `count` must be the number of elements left.
    private mutating func refile(capacity: Int, startingAfter empty: Int?) {
        var old = ContiguousArray<Element?>(repeating: nil, count: capacity)
        swap(&old, &slots)
        var left = count
        count = 0
        salt = _AddressTableSalt.next()
        if let single = single.take() {
            insert(single)
            return
        }
        old.withUnsafeMutableBufferPointer { old in
            var index = empty.map { $0 + 1 } ?? 0
            for _ in old.indices where left > 0 {
                if index == old.count { index = 0 }
                if let element = old[index].take() {
                    insert(element)
                    left -= 1
                }
                index += 1
            }
        }
        assert(left == 0, "_AddressTable: count exceeded the elements re-filed")
    }

    // MARK: Invariants

    /// Checks the invariants after a mutation, under
    /// `SAFEOBSERVE_INTERNAL_CHECKS`, while the table is small enough for
    /// an O(capacity) check per mutation to stay cheap (as
    /// swift-collections checks its own structures in their mutators).
    @inline(__always)
    private func _checkInvariantsIfSmall() {
        #if SAFEOBSERVE_INTERNAL_CHECKS
            if slots.count <= 64 { _checkInvariants() }
        #endif
    }

    /// Checks that every element is reachable from its home slot and that
    /// `count` matches (tests and `_checkInvariants`).
    func _checkInvariants() {
        guard !slots.isEmpty else {
            precondition(count == (single == nil ? 0 : 1), "_AddressTable: count \(count) without slots")
            return
        }
        precondition(single == nil, "_AddressTable: an element outside the slots")
        var seen = 0
        for (index, element) in slots.enumerated() {
            guard let element else { continue }
            seen += 1
            var probe = home(of: element.tableKey)
            while probe != index {
                precondition(slots[probe] != nil, "_AddressTable: element unreachable from its home slot")
                probe = (probe + 1) & mask
            }
        }
        precondition(seen == count, "_AddressTable: count \(count) but \(seen) elements")
        precondition(slots.isEmpty || slots.count & (slots.count - 1) == 0, "_AddressTable: capacity not a power of 2")
    }
}

extension Int {
    /// The smallest power of two not less than `self` (1 for 0 and 1).
    fileprivate var nextPowerOfTwo: Int {
        self <= 1 ? 1 : 1 << (Int.bitWidth - (self - 1).leadingZeroBitCount)
    }
}

/// The salts of ``_AddressTable`` storage: distinct for each allocation in
/// the process until the 32-bit counter wraps (a counter spread over the
/// word), and cheap to draw.
enum _AddressTableSalt {
    private static let counter = Atomic<UInt32>(0)

    static func next() -> UInt32 {
        let number = counter.wrappingAdd(1, ordering: .relaxed).newValue
        return number &* 0x9E37_79B9
    }
}
