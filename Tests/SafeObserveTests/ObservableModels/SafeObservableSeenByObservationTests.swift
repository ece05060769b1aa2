// A `SafeObservable` class that also conforms to `Observable` is tracked by
// Observation as an `@Observable` class is (issue 32, part 2): each case
// below is checked on both, side by side, so that a difference fails.

import Observation
import Synchronization
import Testing

@testable import SafeObserve

// @unchecked Sendable: the tests that share it across threads only read it
// there, or write under their own synchronization.
private final class SafeModel: SafeObservable, Observable, @unchecked Sendable {
    @Observed var count = 0
    @Observed var name = "a"
    @Observed var items: [Int] = []
    @Observed var child: SafeChild?
    @Observed var ratio = 0.0
    @Observed var box = Box()
    @Observed var token = NotEquatable()
    let lifetime: LifetimeCounter?

    var summary: String { "\(name):\(count)" }

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }
    deinit { lifetime?.didDeinit() }
}

private final class SafeChild: SafeObservable, Observable {
    @Observed var level = 0
}

/// The same model, written with the `@Observable` macro.
@Observable
private final class MacroModel {
    var count = 0
    var name = "a"
    var items: [Int] = []
    var child: MacroChild?
    var ratio = 0.0
    var box = Box()
    var token = NotEquatable()

    var summary: String { "\(name):\(count)" }
}

@Observable
private final class MacroChild {
    var level = 0
}

private final class Box {}

private struct NotEquatable {
    var value = 0
}

/// An `@Observable` class with an `AnyObject` property.
@Observable
private final class MacroHolder {
    var object: AnyObject = Box()
}

/// A class that does not conform to `Observable`: Observation never sees it.
private final class PlainSafeModel: SafeObservable {
    @Observed var count = 0
}

/// How many times a one-shot tracking of `read` fired after `write`.
private func firings(_ read: @escaping () -> Void, after write: () -> Void) -> Int {
    let fired = Atomic<Int>(0)
    withObservationTracking(read) { fired.add(1, ordering: .relaxed) }
    write()
    return fired.load(ordering: .relaxed)
}

@Suite("SafeObservable models seen by Observation")
struct SafeObservableSeenByObservationTests {
    @Test func aTrackedPropertysChange_firesOnce_asForAnObservableClass() {
        let safe = SafeModel()
        let macro = MacroModel()
        #expect(firings({ _ = safe.count }, after: { safe.count = 1 }) == 1)
        #expect(firings({ _ = macro.count }, after: { macro.count = 1 }) == 1)
        // A second change after the one-shot fired: nothing more.
        let fired = Atomic<Int>(0)
        withObservationTracking {
            _ = safe.count
        } onChange: {
            fired.add(1, ordering: .relaxed)
        }
        safe.count = 2
        safe.count = 3
        #expect(fired.load(ordering: .relaxed) == 1)
    }

    @Test func aPropertyTheClosureDidNotRead_neverFires() {
        let safe = SafeModel()
        let macro = MacroModel()
        #expect(firings({ _ = safe.count }, after: { safe.name = "b" }) == 0)
        #expect(firings({ _ = macro.count }, after: { macro.name = "b" }) == 0)
        // Another object's property of the same name neither.
        let other = SafeModel()
        #expect(firings({ _ = safe.count }, after: { other.count = 5 }) == 0)
    }

    @Test func computedPropertiesAndGraphsOfModels_areTracked() {
        let safe = SafeModel()
        #expect(firings({ _ = safe.summary }, after: { safe.name = "b" }) == 1)
        #expect(firings({ _ = safe.summary }, after: { safe.count = 9 }) == 1)
        safe.child = SafeChild()
        #expect(firings({ _ = safe.child?.level }, after: { safe.child?.level = 4 }) == 1)
        #expect(firings({ _ = safe.child?.level }, after: { safe.child = SafeChild() }) == 1)
        let macro = MacroModel()
        macro.child = MacroChild()
        #expect(firings({ _ = macro.child?.level }, after: { macro.child?.level = 4 }) == 1)
    }

    @Test func nestedTracking_reportsToEachLevel() {
        let safe = SafeModel()
        let outer = Atomic<Int>(0)
        let inner = Atomic<Int>(0)
        withObservationTracking {
            _ = safe.count
            withObservationTracking {
                _ = safe.name
            } onChange: {
                inner.add(1, ordering: .relaxed)
            }
        } onChange: {
            outer.add(1, ordering: .relaxed)
        }
        safe.name = "b"
        // As with `@Observable`: the outer tracking saw the inner read too.
        #expect(inner.load(ordering: .relaxed) == 1)
        #expect(outer.load(ordering: .relaxed) == 1)
    }

    @Test func inPlaceMutations_fire() {
        let safe = SafeModel()
        let macro = MacroModel()
        #expect(firings({ _ = safe.items }, after: { safe.items.append(1) }) == 1)
        #expect(firings({ _ = macro.items }, after: { macro.items.append(1) }) == 1)
        #expect(firings({ _ = safe.count }, after: { safe.count += 1 }) == 1)
        // A tracking that only mutates in place tracks the property, as `@Observable`'s `_modify` reads it.
        #expect(firings({ safe.count += 1 }, after: { safe.count = 100 }) == 1)
        #expect(firings({ macro.count += 1 }, after: { macro.count = 100 }) == 1)
    }

    @Test func assigningTheSameValue_firesAsForAnObservableClass() {
        let safe = SafeModel()
        let macro = MacroModel()
        // Equatable: an equal value is no change.
        #expect(firings({ _ = safe.count }, after: { safe.count = 0 }) == 0)
        #expect(firings({ _ = macro.count }, after: { macro.count = 0 }) == 0)
        #expect(firings({ _ = safe.name }, after: { safe.name = "a" }) == 0)
        #expect(firings({ _ = macro.name }, after: { macro.name = "a" }) == 0)
        // `==`, not the bits: -0.0 equals 0.0, and NaN equals nothing.
        #expect(firings({ _ = safe.ratio }, after: { safe.ratio = -0.0 }) == 0)
        #expect(firings({ _ = macro.ratio }, after: { macro.ratio = -0.0 }) == 0)
        safe.ratio = .nan
        macro.ratio = .nan
        #expect(firings({ _ = safe.ratio }, after: { safe.ratio = .nan }) == 1)
        #expect(firings({ _ = macro.ratio }, after: { macro.ratio = .nan }) == 1)
        // A class: the same instance is no change, another one is.
        let box = safe.box
        #expect(firings({ _ = safe.box }, after: { safe.box = box }) == 0)
        #expect(firings({ _ = safe.box }, after: { safe.box = Box() }) == 1)
        let macroBox = macro.box
        #expect(firings({ _ = macro.box }, after: { macro.box = macroBox }) == 0)
        // Neither: every assignment is a change.
        #expect(firings({ _ = safe.token }, after: { safe.token = safe.token }) == 1)
        #expect(firings({ _ = macro.token }, after: { macro.token = macro.token }) == 1)
    }

    /// Integer and `Bool` properties of every width are compared by their
    /// bits, inline: an equal value is no change, any other value is one.
    @Test func integerAndBoolProperties_ofEveryWidth_fireOnlyForAnotherValue() {
        final class Widths: SafeObservable, Observable {
            @Observed var int8: Int8 = -1
            @Observed var uint16: UInt16 = 0x8001
            @Observed var int32: Int32 = -2
            @Observed var uint64: UInt64 = .max
            @Observed var flag = true
        }
        let model = Widths()
        #expect(firings({ _ = model.int8 }, after: { model.int8 = -1 }) == 0)
        #expect(firings({ _ = model.int8 }, after: { model.int8 = 1 }) == 1)
        #expect(firings({ _ = model.uint16 }, after: { model.uint16 = 0x8001 }) == 0)
        #expect(firings({ _ = model.uint16 }, after: { model.uint16 = 0x0001 }) == 1)
        #expect(firings({ _ = model.int32 }, after: { model.int32 = -2 }) == 0)
        #expect(firings({ _ = model.int32 }, after: { model.int32 = 2 }) == 1)
        #expect(firings({ _ = model.uint64 }, after: { model.uint64 = .max }) == 0)
        #expect(firings({ _ = model.uint64 }, after: { model.uint64 = .max - 1 }) == 1)
        #expect(firings({ _ = model.flag }, after: { model.flag = true }) == 0)
        #expect(firings({ _ = model.flag }, after: { model.flag = false }) == 1)
    }

    /// An `AnyObject` property given the instance it holds is no change,
    /// as for an `@Observable` class (attack D12).
    @Test func anAnyObjectPropertyGivenTheInstanceItHolds_isNoChange() {
        final class SafeHolder: SafeObservable, Observable {
            @Observed var object: AnyObject = Box()
        }
        let safe = SafeHolder()
        let macro = MacroHolder()
        #expect(firings({ _ = safe.object }, after: { safe.object = safe.object }) == 0)
        #expect(firings({ _ = macro.object }, after: { macro.object = macro.object }) == 0)
        #expect(firings({ _ = safe.object }, after: { safe.object = Box() }) == 1)
    }

    /// A generic class decides by the type it is instantiated with, at run
    /// time (documented): an `@Observable` generic class decides by the
    /// declared type, so for a property of type `T` every assignment is a
    /// change there (attack D13).
    @Test func aGenericClass_decidesSameValuesByTheTypeItIsInstantiatedWith() {
        final class SafeBox<T>: SafeObservable, Observable {
            @Observed var value: T
            init(_ value: T) { self.value = value }
        }
        let ints = SafeBox(1)
        #expect(firings({ _ = ints.value }, after: { ints.value = 1 }) == 0)
        #expect(firings({ _ = ints.value }, after: { ints.value = 2 }) == 1)
        let tokens = SafeBox(NotEquatable())
        #expect(firings({ _ = tokens.value }, after: { tokens.value = tokens.value }) == 1)
    }

    @Test func aModelThatDiesWhileTracked_isFine_andNotKeptAlive() {
        let lifetime = LifetimeCounter()
        let fired = Atomic<Int>(0)
        weak var weakModel: SafeModel?
        do {
            let safe = SafeModel(lifetime: lifetime)
            weakModel = safe
            withObservationTracking {
                _ = safe.count
            } onChange: {
                fired.add(1, ordering: .relaxed)
            }
        }
        #expect(weakModel == nil)
        #expect(lifetime.liveCount == 0)
        #expect(fired.load(ordering: .relaxed) == 0)
    }

    @Test func aClassThatIsNotObservable_isNeverSeen() {
        let plain = PlainSafeModel()
        #expect(firings({ _ = plain.count }, after: { plain.count = 1 }) == 0)
    }

    @Test func safeObserveRelationsStillDeliverSynchronously_besideObservation() {
        let safe = SafeModel()
        let listener = Listener()
        var told: [Int] = []
        let fired = Atomic<Int>(0)
        let token = safe.safeObserve(\.count, by: listener, options: [.new]) { _, _, change in
            told.append(change.newValue!)
        }
        withObservationTracking {
            _ = safe.count
        } onChange: {
            fired.add(1, ordering: .relaxed)
        }
        safe.count = 1
        safe.count = 2
        #expect(told == [1, 2])
        #expect(fired.load(ordering: .relaxed) == 1)
        token.invalidate()
    }

    @Test func observationsSeesEveryValue_ofAModelChangedAfterEachRead() async {
        let safe = SafeModel()
        let values = Observations { safe.count }
        var iterator = values.makeAsyncIterator()
        #expect(await iterator.next(isolation: #isolation) == 0)
        safe.count = 1
        #expect(await iterator.next(isolation: #isolation) == 1)
        safe.count = 2
        #expect(await iterator.next(isolation: #isolation) == 2)
    }

    /// After its first read (which creates its registrar, and so needs what
    /// a write needs), a property is read on many threads at once while a
    /// tracking waits: no race (run under TSan in CI), and the tracking
    /// still fires once. Repeated on new models.
    @Test func afterTheFirstRead_readsOnManyThreadsAtOnce_areFine() async {
        for _ in 0..<100 {
            let safe = SafeModel()
            _ = safe.count
            let fired = Atomic<Int>(0)
            withObservationTracking {
                _ = safe.count
            } onChange: {
                fired.add(1, ordering: .relaxed)
            }
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<4 {
                    group.addTask {
                        for _ in 0..<100 { _ = safe.count }
                    }
                }
            }
            safe.count += 1
            #expect(fired.load(ordering: .relaxed) == 1)
        }
    }

    @Test func aSubclassOfAnObservableSafeModel_reportsItsOwnPropertiesToo() {
        class Base: SafeObservable, Observable {
            @Observed var base = 0
        }
        final class Derived: Base {
            @Observed var derived = 0
        }
        let model = Derived()
        #expect(firings({ _ = model.base }, after: { model.base = 1 }) == 1)
        #expect(firings({ _ = model.derived }, after: { model.derived = 1 }) == 1)
    }

    @Test func readingInDeinit_neitherCrashesNorReports() {
        final class ReadsInDeinit: SafeObservable, Observable {
            @Observed var count = 0
            deinit { _ = count }
        }
        var model: ReadsInDeinit? = ReadsInDeinit()
        model = nil
        #expect(model == nil)
    }

    /// A property first observed by a registration that reaches its
    /// storage directly (the key path's field is cached after the first
    /// registration on the class) still reports to Observation.
    @Test func aPropertyFirstObservedThroughTheCachedField_isSeenByObservation() {
        final class Cached: SafeObservable, Observable {
            @Observed var count = 0
        }
        let listener = Cached()
        let first = Cached()
        first.safeObserve(\.count, by: listener) { _, _, _ in }.invalidate()
        for _ in 0..<3 {
            let model = Cached()
            model.safeObserve(\.count, by: listener) { _, _, _ in }.invalidate()
            #expect(firings({ _ = model.count }, after: { model.count += 1 }) == 1)
        }
    }

    /// A property read before SafeObserve observes it has a sentinel that
    /// no relation was ever added to (its setter skips the emission then):
    /// a relation added later is told every change, and after it ended the
    /// property still reports to Observation.
    @Test func aPropertyReadBeforeItsFirstRelation_deliversToRelationsAddedLater() {
        let safe = SafeModel()
        _ = safe.count
        safe.count = 1
        let listener = Listener()
        var told: [Int] = []
        let token = safe.safeObserve(\.count, by: listener, options: [.new]) { _, _, change in
            told.append(change.newValue!)
        }
        safe.count = 2
        safe.count += 1
        #expect(told == [2, 3])
        token.invalidate()
        safe.count = 4
        #expect(told == [2, 3])
        #expect(firings({ _ = safe.count }, after: { safe.count = 5 }) == 1)
    }

    /// A property first read by a registration resolving a derived key path
    /// gets the sentinel that reports to Observation, as a plain first read
    /// would: Observation then sees it, and the relation is told.
    @Test func aPropertyFirstReadByARegistrationsResolution_isSeenByObservation() {
        for _ in 0..<3 {
            let safe = SafeModel()
            let listener = Listener()
            var told: [String] = []
            let token = safe.safeObserve(\.summary, by: listener, options: [.new]) { _, _, change in
                told.append(change.newValue!)
            }
            #expect(firings({ _ = safe.count }, after: { safe.count = 1 }) == 1)
            #expect(firings({ _ = safe.summary }, after: { safe.name = "b" }) == 1)
            #expect(told == ["a:1", "b:1"])
            token.invalidate()
        }
    }

    /// The choice is made once per conformance: `Observable` added by a
    /// subclass of a class that declared only `SafeObservable` is not seen
    /// (as documented).
    @Test func observableAddedOnlyBySubclass_isNotSeen() {
        class OnlySafe: SafeObservable {
            @Observed var count = 0
        }
        final class AddsObservable: OnlySafe, Observable {
            @Observed var extra = 0
        }
        let model = AddsObservable()
        #expect(firings({ _ = model.count }, after: { model.count = 1 }) == 0)
        #expect(firings({ _ = model.extra }, after: { model.extra = 1 }) == 0)
    }

    /// Every SafeObserve API takes a class that is both, as a
    /// `SafeObservable` (synchronous delivery), with no ambiguity.
    @Test func safeObserveAPIs_takeAClassThatIsBoth_asASafeObservable() async {
        let safe = SafeModel()
        let owner = ControllerOwner()
        var told: [Int] = []
        owner.observationController.observe(safe, keyPath: \.count, options: [.new], isolation: nil) { _, _, change in
            told.append(change.newValue!)
        }
        safe.count = 7
        #expect(told == [7])  // synchronous: a SafeObservable's delivery
        owner.observationController.unobserve(safe, keyPath: \.count)
        safe.safeUnobserve(by: owner)
        var values = safe.values(\.count).makeAsyncIterator()
        #expect(await values.next(isolation: #isolation) == 7)
        safe.count = 8
        #expect(await values.next(isolation: #isolation) == 8)
    }
}

private final class ControllerOwner: ObservationControllerOwner {
    let observationControllerStorage = ObservationControllerStorage()
}
