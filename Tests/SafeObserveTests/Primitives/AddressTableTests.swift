import Testing

@testable import SafeObserve

/// Keys are object identities; these boxes give stable, distinct ones.
private final class Key {}

private struct Element: _AddressKeyed, Equatable {
    let tableKey: ObjectIdentifier
    let value: Int
}

/// An element held by reference, for tests that read slots: under -O, Swift
/// 6.3.1 reads an empty slot of a table of `Element` (a struct whose spare
/// bits are an `ObjectIdentifier`'s) as occupied when the optional it
/// returns across the module boundary is tested with `!= nil`, `switch` or
/// `map` (`if let` reads it right). SafeObserve reads its tables' slots
/// with `if let` only, inside its own module.
private final class Boxed: _AddressKeyed {
    let tableKey: ObjectIdentifier
    let value: Int
    init(tableKey: ObjectIdentifier, value: Int) {
        self.tableKey = tableKey
        self.value = value
    }
}

@Suite("Internal: the address table")
struct AddressTableTests {
    /// Random inserts and removals against a dictionary model, with the
    /// table's own invariants (every element reachable from its home slot,
    /// count, power-of-2 capacity) checked after every operation.
    ///
    /// It yields its thread every 32 operations: under the thread sanitizer
    /// its four cases took both threads of the test run's pool for about
    /// four minutes, during which no other test finished, and two tests
    /// waiting 60 s for the main actor failed in CI.
    @Test(arguments: [1 as UInt64, 2, 3, 4])
    func randomInsertsAndRemovals_matchAModel_andKeepEveryElementReachable(seed: UInt64) async {
        var random = SplitMix64(seed: seed)
        // Few keys, many values per key: long probe runs and backward shifts.
        let keys = (0..<40).map { _ in Key() }
        var table = _AddressTable<Element>()
        var model: [ObjectIdentifier: [Int]] = [:]
        for step in 0..<4_000 {
            let key = ObjectIdentifier(keys[random.next(keys.count)])
            if random.next(3) > 0 {
                table.insert(Element(tableKey: key, value: step))
                model[key, default: []].append(step)
            } else if let values = model[key], !values.isEmpty {
                let victim = values[random.next(values.count)]
                let removed = table.remove(under: key) { $0.value == victim }
                #expect(removed?.value == victim, "seed \(seed), step \(step)")
                model[key]!.removeAll { $0 == victim }
            } else {
                // The removed element's value: `#expect(removed == nil)` on
                // this private Equatable type misreports in optimized builds
                // (the value is nil; Swift Testing's comparison says otherwise).
                #expect(table.remove(under: key) { _ in true }?.value == nil, "seed \(seed), step \(step)")
            }
            table._checkInvariants()
            #expect(table.count == model.values.reduce(0) { $0 + $1.count })
            if step.isMultiple(of: 32) { await Task.yield() }
        }
        for key in keys.map(ObjectIdentifier.init) {
            // In the order they were filed, whatever rehashes happened since.
            var filed: [Int] = []
            table.forEach(under: key) { element in
                filed.append(element.value)
                return true
            }
            #expect(filed == model[key] ?? [], "seed \(seed)")
        }
        let all = table.removeAll()
        #expect(all.count == model.values.reduce(0) { $0 + $1.count })
        #expect(table.isEmpty && table.capacity == 0)
    }

    /// Elements filed under one key whose probe run wraps past the table's
    /// last slot keep their order when the table grows (a rehash that
    /// re-inserted from slot 0 put the wrapped ones first).
    @Test func elementsUnderOneKey_keepTheirOrder_whenTheirRunWrapsAndTheTableGrows() {
        // Each storage allocation hashes with a salt of its own: the key is
        // found in the 8-slot table it is then filed in (which keeps its
        // storage while it empties).
        var table = _AddressTable<Boxed>()
        // Grown to 8 slots (a table starts with 2), then emptied: a table
        // of 16 slots or fewer keeps its storage.
        let fillers = (1...5).map { unsafeBitCast(UInt(0x7000_0000 + $0 * 16), to: ObjectIdentifier.self) }
        for filler in fillers { table.insert(Boxed(tableKey: filler, value: 0)) }
        for filler in fillers { table.remove(under: filler) { _ in true } }
        /// A key whose home slot is the last of `table`'s 8.
        func keyHomedInLastSlot() -> ObjectIdentifier? {
            for bits in stride(from: UInt(0x1000), to: 0x1000 + 16 * 4_096, by: 16) {
                let key = unsafeBitCast(bits, to: ObjectIdentifier.self)
                table.insert(Boxed(tableKey: key, value: 0))
                let homed = table.capacity == 8 && table.element(inSlot: 7) != nil
                table.remove(under: key) { _ in true }
                if homed { return key }
            }
            return nil
        }
        guard let key = keyHomedInLastSlot() else {
            Issue.record("no key homed in the last slot")
            return
        }
        #expect(table.isEmpty && table.capacity == 8)
        for value in 1...3 { table.insert(Boxed(tableKey: key, value: value)) }  // slots 7, 0, 1
        #expect(table.element(inSlot: 0)?.value == 2, "the run wraps")
        var other = UInt(bitPattern: key)
        for value in 4...9 {  // other keys, until the table grows to 16 slots
            other &+= 0x10_0000
            table.insert(Boxed(tableKey: unsafeBitCast(other, to: ObjectIdentifier.self), value: value))
        }
        #expect(table.capacity > 8)
        var order: [Int] = []
        table.forEach(under: key) { element in
            order.append(element.value)
            return true
        }
        #expect(order == [1, 2, 3], "elements filed under one key came back as \(order) after a rehash")
    }

    @Test func keepsItsCapacityWhenItEmpties_soAListenerThatObservesInALoopDoesNotReallocate() {
        let key = Key()
        var table = _AddressTable<Element>()
        table.insert(Element(tableKey: ObjectIdentifier(key), value: 1))
        table.insert(Element(tableKey: ObjectIdentifier(key), value: 2))
        let capacity = table.capacity
        for _ in 0..<2 { table.remove(under: ObjectIdentifier(key)) { _ in true } }
        #expect(table.isEmpty)
        #expect(table.hasStorage)
        #expect(table.capacity == capacity)
        withExtendedLifetime(key) {}
    }

    @Test func aTableThatNeverHeldTwoElements_hasNoStorage_andFindsItsElement() {
        let key = Key()
        let other = Key()
        var table = _AddressTable<Element>()
        for round in 0..<3 {
            table.insert(Element(tableKey: ObjectIdentifier(key), value: round))
            #expect(!table.hasStorage)
            #expect(table.count == 1)
            #expect(table.first(under: ObjectIdentifier(other)) { $0.value } == nil)
            #expect(table.first(under: ObjectIdentifier(key)) { $0.value } == round)
            // `?.value`: see the comparison with `nil` above.
            #expect(table.remove(under: ObjectIdentifier(other)) { _ in true }?.value == nil)
            #expect(table.remove(under: ObjectIdentifier(key)) { _ in true }?.value == round)
            #expect(table.isEmpty)
        }
        // The second element moves both into slots, the first filed first.
        table.insert(Element(tableKey: ObjectIdentifier(key), value: 1))
        table.insert(Element(tableKey: ObjectIdentifier(key), value: 2))
        #expect(table.hasStorage)
        var order: [Int] = []
        table.forEach(under: ObjectIdentifier(key)) { element in
            order.append(element.value)
            return true
        }
        #expect(order == [1, 2])
        table._checkInvariants()
        withExtendedLifetime((key, other)) {}
    }
}
