import Testing

@testable import SafeObserve

/// A hub to own the channels (their object, never used here).
private let owner = NotificationHub()

@Suite("Internal: the hub's name table")
struct NameTableTests {
    /// Random inserts and removals against a dictionary model, with the
    /// table's invariants (every channel reachable from its home slot, one
    /// slot per name, count, power-of-2 capacity) checked after each step;
    /// the table shrinks as channels go, and a borrowed look-up finds what
    /// the model has.
    @Test(arguments: [1 as UInt64, 2, 3])
    func randomInsertsAndRemovals_matchAModel_andMemoryFollowsTheChannels(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var table = _NameTable()
        var model: [Int: _Channel] = [:]
        // Identities in clusters (consecutive names) and far apart.
        let names = (0..<300).map { $0 < 150 ? $0 : 1_000_000 + $0 * 4_099 }
        for step in 0..<6_000 {
            let name = names[random.next(names.count)]
            // Grow to a peak, then mostly remove.
            let inserting = step < 3_000 ? random.next(4) > 0 : random.next(4) == 0
            if inserting, model[name] == nil {
                let channel = _Channel(object: owner, keyPath: nil)
                table.insert(channel, for: name)
                model[name] = channel
            } else if !inserting {
                let removed = table.remove(name)
                #expect(removed === model.removeValue(forKey: name), "seed \(seed), step \(step)")
            }
            table._checkInvariants()
            #expect(table.count == model.count)
            let probe = names[random.next(names.count)]
            #expect(table.borrowedChannel(probe)?.takeUnretainedValue() === model[probe], "seed \(seed), step \(step)")
        }
        for name in Array(model.keys) {
            #expect(table.remove(name) === model.removeValue(forKey: name))
        }
        #expect(table.count == 0)
        #expect(table.capacity <= 16, "an emptied table kept \(table.capacity) slots")
    }
}
