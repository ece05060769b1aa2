// A SafeObservationRegistrar whose subscript had many key paths observed
// (one per argument): its cost and memory follow the key paths observed
// now, never those observed before. Complexity is compared as the n-th
// operation against an early one in one process (a ratio with a generous
// threshold), never as an absolute time.

import Dispatch
import Synchronization
import Testing

@testable import SafeObserve

/// A registrar-backed subscript (one key path per index) and one more
/// property that nobody observes.
// @unchecked Sendable: in the concurrent test, `cells` is written by one
// thread only and `storedOther` by another; the registrar is Sendable.
private final class Grid: SafeObservable, @unchecked Sendable {
    let registrar = SafeObservationRegistrar()
    private var cells = [Int](repeating: 0, count: 2_000)
    private var storedOther = 0

    subscript(index: Int) -> Int {
        get {
            registrar.access(self, keyPath: \.[index])
            return cells[index]
        }
        set {
            registrar.withMutation(of: self, keyPath: \.[index]) { cells[index] = newValue }
        }
    }

    var other: Int {
        get {
            registrar.access(self, keyPath: \.other)
            return storedOther
        }
        set {
            registrar.withMutation(of: self, keyPath: \.other) { storedOther = newValue }
        }
    }
}

/// A subscript argument whose hashes all collide: key paths that differ
/// only by it hash alike and are told apart by `==` alone.
private struct Colliding: Hashable, Sendable {
    let value: Int
    func hash(into hasher: inout Hasher) { hasher.combine(0) }
}

private final class Shelf: SafeObservable {
    let registrar = SafeObservationRegistrar()
    private var items: [Int: String] = [:]

    subscript(key: Colliding) -> String? {
        get {
            registrar.access(self, keyPath: \.[key])
            return items[key.value]
        }
        set {
            registrar.withMutation(of: self, keyPath: \.[key]) { items[key.value] = newValue }
        }
    }
}

/// A derived key path that reads the registrar-backed cell `current` selects.
// @unchecked Sendable: in the concurrent test, `current` and `cells` are
// written by one thread only and `storedOther` by another.
private final class Board: SafeObservable, @unchecked Sendable {
    let registrar = SafeObservationRegistrar()
    @Observed var current = 0
    private var cells = [Int](repeating: 0, count: 64)
    private var storedOther = 0

    subscript(index: Int) -> Int {
        get {
            registrar.access(self, keyPath: \.[index])
            return cells[index]
        }
        set {
            registrar.withMutation(of: self, keyPath: \.[index]) { cells[index] = newValue }
        }
    }

    var other: Int {
        get {
            registrar.access(self, keyPath: \.other)
            return storedOther
        }
        set {
            registrar.withMutation(of: self, keyPath: \.other) { storedOther = newValue }
        }
    }

    var selected: Int { self[current] }
}

private final class Plain: Sendable {}

@Suite("SafeObservationRegistrar with many key paths", .serialized)
struct RegistrarWithManyKeyPathsTests {
    @Test func withMutationOfAnUnobservedProperty_doesNotScaleWithTheKeyPathsObservedBefore() {
        func object(observing keyPaths: Int) -> (Grid, Plain) {
            let grid = Grid()
            let listener = Plain()
            for index in 0..<keyPaths { grid.safeObserve(\.[index], by: listener) { _, _, _ in } }
            return (grid, listener)
        }
        /// 100 sets of `other`, which nobody observes.
        func sets(_ grid: Grid) -> Duration { fastest(of: 15) { for value in 0..<100 { grid.other = value } } }
        var last = (early: Duration.zero, late: Duration.zero, afterRemoval: Duration.zero, removed: false)
        // Each attempt on objects of its own.
        let ratios = smallestRatios(below: 4) {
            let (few, fewListener) = object(observing: 8)
            let (many, manyListener) = object(observing: 400)
            let early = sets(few)
            let late = sets(many)
            SafeObservation.removeAll(observedBy: manyListener)
            let removed = SafeObservation.relations(of: many).isEmpty
            let afterRemoval = sets(many)
            withExtendedLifetime((fewListener, manyListener)) {}
            last = (early, late, afterRemoval, removed)
            return [late / early, afterRemoval / early]
        }
        #expect(
            ratios[0] < 4,
            "withMutation of an unobserved property after 400 key paths were observed costs \(ratios[0])× what it costs after 8 (last attempt \(describe(last.early)) → \(describe(last.late)) per 100)"
        )
        #expect(last.removed)
        #expect(
            ratios[1] < 4,
            "…and \(ratios[1])× once every relation was removed (last attempt \(describe(last.afterRemoval)) per 100)"
        )
    }

    /// Each key path by a listener of its own: one listener's relations on
    /// one object are filed together in its proxy, which costs O(its
    /// relations on that object) per registration, as documented; the
    /// registrar and the index of observed properties cost O(1).
    @Test func registeringAnotherKeyPath_doesNotScaleWithTheKeyPathsObservedBefore() {
        var last = (early: Duration.zero, late: Duration.zero, relations: 0, observed: 0)
        // Each attempt on an object of its own.
        let ratio = smallestRatios(below: 4) {
            let grid = Grid()
            var listeners: [Plain] = []
            var next = 0
            func observeNext() {
                let listener = Plain()
                listeners.append(listener)
                grid.safeObserve(\.[next], by: listener) { _, _, _ in }
                next += 1
            }
            /// Observes 20 key paths never observed before.
            func registrations() -> Duration { fastest(of: 15) { for _ in 0..<20 { observeNext() } } }
            let early = registrations()  // 0–300 key paths observed
            while next < 1_500 { observeNext() }
            let late = registrations()  // 1,500–1,800
            last = (early, late, SafeObservation.relations(of: grid).count, next)
            withExtendedLifetime(listeners) {}
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "registering a key path after 1,500 were observed costs \(ratio)× what it costs at first (last attempt \(describe(last.early)) → \(describe(last.late)) per 20)"
        )
        #expect(last.relations == last.observed)
    }

    @Test func relationsOfAnObjectWithManyObservedKeyPaths_stayInFirstObservationOrder() {
        let grid = Grid()
        let listener = Plain()
        var tokens: [Int: ObservationToken] = [:]
        for index in 0..<40 { tokens[index] = grid.safeObserve(\.[index], by: listener) { _, _, _ in } }
        func order() -> [AnyKeyPath?] { SafeObservation.relations(of: grid).map(\.keyPath) }
        #expect(order() == (0..<40).map { \Grid.[$0] })
        for index in [3, 15, 16, 39] { tokens[index]!.invalidate() }
        for value in 0..<200 { grid.other = value }  // the registrar forgets them
        for index in [50, 3] { tokens[index] = grid.safeObserve(\.[index], by: listener) { _, _, _ in } }
        // 3 was observed again after 50: a property nobody observed any more
        // was forgotten, and its next observation counts as a first.
        let expected = (0..<40).filter { ![3, 15, 16, 39].contains($0) } + [50, 3]
        #expect(order() == expected.map { \Grid.[$0] })
        withExtendedLifetime(listener) {}
    }

    @Test func keyPathsNobodyObservesAnyMore_areForgotten_asTheRegistrarIsUsed() {
        let grid = Grid()
        let listener = Plain()
        for index in 0..<300 { grid.safeObserve(\.[index], by: listener) { _, _, _ in } }
        #expect(grid.registrar._observedKeyPathCount == 300)
        SafeObservation.removeAll(observedBy: listener)
        // Mutations of properties nobody observes pay for the sweep, amortized.
        for value in 0..<1_500 { grid.other = value }
        #expect(grid.registrar._observedKeyPathCount == 0, "the registrar still holds key paths nobody observes")
        // So do registrations: key paths observed once each never pile up.
        for index in 0..<2_000 {
            let token = grid.safeObserve(\.[index], by: listener) { _, _, _ in }
            if index != 1_999 { token.invalidate() }
        }
        #expect(grid.registrar._observedKeyPathCount <= 100, "\(grid.registrar._observedKeyPathCount) key paths held")
        #expect(SafeObservation.relations(of: grid).count == 1)
        withExtendedLifetime(listener) {}
    }

    @Test func aKeyPathObservedAgainAfterItWasForgotten_deliversToItsNewRelation() {
        let grid = Grid()
        let listener = RecordingListener()
        grid.safeObserve(\.[1], by: listener) { _, _, _ in }.invalidate()
        for value in 0..<100 { grid.other = value }
        #expect(grid.registrar._observedKeyPathCount == 0)
        grid.safeObserve(\.[1], by: listener) { listener, _, change in listener.record("\(change.newValue!)") }
        grid[1] = 7
        #expect(listener.log == ["7"])
    }

    @Test func keyPathsWhoseHashesCollide_areToldApartByEquality() {
        let shelf = Shelf()
        let listener = RecordingListener()
        for value in 0..<20 {
            shelf.safeObserve(\.[Colliding(value: value)], by: listener) { listener, _, change in
                listener.record("\(value)=\(change.newValue!!)")
            }
        }
        #expect(shelf.registrar._observedKeyPathCount == 20)
        shelf[Colliding(value: 3)] = "three"
        shelf[Colliding(value: 17)] = "seventeen"
        shelf[Colliding(value: 99)] = "unobserved"
        #expect(listener.log == ["3=three", "17=seventeen"])
    }

    /// Forgetting a key path nobody observes races with registrations on
    /// it: a registration that found the key path's sentinel must never
    /// see it torn down before its relation is added (the relation would
    /// end at once, on a live object).
    @Test func forgettingKeyPaths_whileOtherThreadsObserveThem_neverEndsANewRelation() {
        let grid = Grid()
        let stop = Flag()
        let failures = Atomic<Int>(0)
        let rounds = StressConfig.rounds(3_000)
        let group = DispatchGroup()
        // Sweeps: every unobserved mutation may forget unobserved key paths.
        DispatchQueue.global().async(group: group) {
            var value = 0
            while !stop.isSet {
                value += 1
                grid.other = value
            }
        }
        DispatchQueue.global().async(group: group) {
            defer { stop.set() }
            let listener = Plain()
            let delivered = Atomic<Int>(0)
            for round in 0..<rounds {
                let index = round % 8
                let token = grid.safeObserve(\.[index], by: listener) { _, _, change in
                    delivered.store(change.newValue!, ordering: .relaxed)
                }
                grid[index] = round + 1
                if !token.isActive || delivered.load(ordering: .relaxed) != round + 1 {
                    failures.add(1, ordering: .relaxed)
                }
                token.invalidate()
            }
        }
        #expect(group.wait(timeout: .now() + 120) == .success, "the threads did not finish")
        #expect(failures.load(ordering: .relaxed) == 0, "relations ended at once or missed their change")
    }

    /// The same for a derived key path whose re-evaluation reads a cell
    /// its relation did not depend on: the dependency it adds must not be
    /// forgotten meanwhile (the relation would miss that cell's changes).
    @Test func forgettingKeyPaths_whileADerivedKeyPathRebindsToThem_neverDropsADependency() {
        let board = Board()
        let stop = Flag()
        let failures = Atomic<Int>(0)
        let rounds = StressConfig.rounds(3_000)
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) {
            var value = 0
            while !stop.isSet {
                value += 1
                board.other = value
            }
        }
        DispatchQueue.global().async(group: group) {
            defer { stop.set() }
            let listener = Plain()
            let delivered = Atomic<Int>(0)
            board.safeObserve(\.selected, by: listener) { _, _, change in
                delivered.store(change.newValue!, ordering: .relaxed)
            }
            for round in 0..<rounds {
                board.current = round % 64  // re-binds to that cell, unobserved until now
                board[round % 64] = round + 1_000
                if delivered.load(ordering: .relaxed) != round + 1_000 { failures.add(1, ordering: .relaxed) }
            }
        }
        #expect(group.wait(timeout: .now() + 120) == .success, "the threads did not finish")
        #expect(failures.load(ordering: .relaxed) == 0, "a derived key path missed changes of a cell it re-bound to")
    }
}
