import Dispatch
import Synchronization
import Testing

@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#endif

// Objects with stored properties SafeObserve does not own: it must never read
// them (issue: registration and introspection reflected over every field).

private final class Owner {}

private final class HoldsDeadUnowned: SafeObservable {
    @Observed var count = 0
    unowned var owner: Owner
    init(owner: Owner) { self.owner = owner }
}

private final class HoldsDeadUnownedUnsafe: SafeObservable {
    @Observed var count = 0
    // unowned(unsafe): deliberately left dangling; the test never reads it.
    unowned(unsafe) var owner: Owner
    init(owner: Owner) { self.owner = owner }
}

private final class CustomReflecting: SafeObservable, CustomReflectable {
    @Observed var count = 0
    let mirrorCalls = Atomic<Int>(0)
    var customMirror: Mirror {
        mirrorCalls.add(1, ordering: .relaxed)
        return Mirror(self, children: [])
    }
}

private final class BusyNeighbour: SafeObservable {
    @Observed var count = 0
    // Written by another thread while SafeObserve registers and introspects.
    var scratch = "a string long enough to live on the heap, so a torn read would crash"
}

private class ObservedBase: SafeObservable {
    @Observed var a = 0
}

private final class ObservedSub: ObservedBase {
    @Observed var b = 0
}

@Suite("Objects with fields SafeObserve does not own")
struct ForeignFieldsTests {
    @Test func aDeadUnownedField_doesNotStopRegistration_introspection_orDelivery() {
        let object = HoldsDeadUnowned(owner: Owner())  // the owner dies at once
        let listener = Listener()
        let token = object.safeObserve(\.count, by: listener) { listener, _, change in
            listener.record("\(change.newValue!)")
        }
        // A second registration with the same key path takes the cached path.
        let other = HoldsDeadUnowned(owner: Owner())
        other.safeObserve(\.count, by: listener) { _, _, _ in }
        #expect(SafeObservation.relations(of: object) == [token])
        #expect(token.debugDescription.contains("\\HoldsDeadUnowned.count"))
        object.count = 1
        #expect(listener.log == ["1"])
    }

    @Test func aDanglingUnownedUnsafeField_isNeverRead() {
        // Under the address sanitizer, any read of `owner` is a use-after-free.
        let object = HoldsDeadUnownedUnsafe(owner: Owner())
        let listener = Listener()
        let token = object.safeObserve(\.count, by: listener) { _, _, _ in }
        #expect(SafeObservation.relations(of: object) == [token])
        #expect(SafeObservation.relations(observedBy: listener) == [token])
    }

    @Test func aCustomMirror_isNeverRun_andTheObjectsRelationsAreListed() {
        let object = CustomReflecting()
        let listener = Listener()
        let first = object.safeObserve(\.count, by: listener) { _, _, _ in }
        let second = CustomReflecting()
        second.safeObserve(\.count, by: listener) { _, _, _ in }
        // A leak test built on introspection must see the relation.
        #expect(SafeObservation.relations(of: object) == [first])
        _ = first.debugDescription
        #expect(object.mirrorCalls.load(ordering: .relaxed) == 0)
        #expect(second.mirrorCalls.load(ordering: .relaxed) == 0)
    }

    @Test func introspectionAndRegistration_raceNoWriteOfAnotherStoredProperty() {
        // Reflection read every field while this thread wrote `scratch`: a
        // torn String read crashed within seconds. Loops, for a real chance.
        for _ in 0..<StressConfig.rounds(20) {
            let shared = UncheckedSendable((BusyNeighbour(), Listener()))
            let done = Atomic<Bool>(false)
            let failures = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: 2) { worker in
                let (object, listener) = shared.value
                if worker == 0 {
                    // Bounded: `concurrentPerform` may run the workers one
                    // after the other when the pool is busy with other suites.
                    var flip = false
                    var writes = 0
                    while !done.load(ordering: .relaxed), writes < 200_000 {
                        writes += 1
                        // The only writer of `scratch`; SafeObserve must never read it.
                        object.scratch = flip ? "long enough to live on the heap: one" : "and another, long enough"
                        flip.toggle()
                    }
                } else {
                    for _ in 0..<50 {
                        let token = object.safeObserve(\.count, by: listener) { _, _, _ in }
                        if SafeObservation.relations(of: object) != [token] { failures.add(1, ordering: .relaxed) }
                        token.invalidate()
                    }
                    done.store(true, ordering: .relaxed)
                }
            }
            #expect(failures.load(ordering: .relaxed) == 0)
        }
    }

    @Test func subclassFieldsAndSuperclassFields_areFoundFromMetadata() {
        let object = ObservedSub()
        let listener = Listener()
        // `\ObservedBase.a` on a subclass instance: the field is the superclass's.
        let a = (object as ObservedBase).safeObserve(\.a, by: listener) { _, _, _ in }
        let b = object.safeObserve(\.b, by: listener) { _, _, _ in }
        #expect(Set(SafeObservation.relations(of: object)) == [a, b])
        #expect(a.debugDescription.contains(".a,"))
        #expect(b.debugDescription.contains(".b,"))
    }

    @Test func aStaticallyLivingSingleton_isObservedThroughTheCachedPath() {
        // The cached path validated its offset with malloc_usable_size, which
        // must never see a statically allocated object. (Release builds of
        // the consumer package observe a data-segment singleton; here, the
        // second registration takes the cached path without asking the allocator.)
        let listener = Listener()
        let first = Settings.shared.safeObserve(\.volume, by: listener) { listener, _, change in
            listener.record("\(change.newValue!)")
        }
        let again = Settings.shared.safeObserve(\.volume, by: Listener()) { _, _, _ in }
        Settings.shared.volume += 1
        #expect(listener.log.count == 1)
        first.invalidate()
        again.invalidate()
    }

    /// In a process of its own: before the fix, reflecting a token whose
    /// relation had ended loaded the token's unowned reference to it, which
    /// traps once the relation is deinitialized — `dump(token)` stopped the
    /// program (so did a failed `#expect` describing one).
    @Test func reflectingTokensAndObservationsWhoseRelationsEnded_neverTraps() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            var dumped = ""
            let counter = Counter()
            // Ended by invalidation.
            let ended = counter.safeObserve(\.count, by: Listener()) { _, _, _ in }
            ended.invalidate()
            dump(ended, to: &dumped)
            // Ended by the listener's death, and by the object's death.
            let byListener = counter.safeObserve(\.count, by: Listener()) { _, _, _ in }
            var object: Counter? = Counter()
            let byObject = object!.safeObserve(\.count, by: Listener()) { _, _, _ in }
            object = nil
            counter.count += 1  // finds the dead listener and ends its relation
            dump([byListener, byObject], to: &dumped)
            // A derived key path's token, and an invalidated KVO-shaped observation.
            let node = NodeA(b: NodeB())
            let derived = node.safeObserve(\.b.c.value, by: Listener()) { _, _, _ in }
            derived.invalidate()
            let observation = counter.observe(\.count, isolation: nil) { _, _ in }
            observation.invalidate()
            dump((derived, observation), to: &dumped)
            _ = String(reflecting: ended) + String(describing: Mirror(reflecting: byObject).children.map(\.label))
            expectInChild(dumped.contains("address"), "the tokens were not reflected: \(dumped)")
        }
        #expect(result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } == "")
    }
}

private class GenericBox<Payload>: SafeObservable {
    var payload: Payload
    @Observed var count = 0
    init(_ payload: Payload) { self.payload = payload }
}

private final class BoxOfStrings: GenericBox<String> {
    @Observed var label = ""
}

extension ForeignFieldsTests {
    /// Field offsets of generic classes depend on the specialization; the
    /// cached offset must be validated per class, never assumed.
    @Test func genericClassesAndTheirSubclasses_resolveTheirOwnFields() {
        let listener = Listener()
        let small = GenericBox<UInt8>(1)
        let large = GenericBox<(Int, Int, Int, Int)>((1, 2, 3, 4))
        let sub = BoxOfStrings("x")
        let tokens = [
            small.safeObserve(\.count, by: listener) { listener, _, _ in listener.record("small") },
            large.safeObserve(\.count, by: listener) { listener, _, _ in listener.record("large") },
            sub.safeObserve(\.label, by: listener) { listener, _, _ in listener.record("label") },
            (sub as GenericBox<String>).safeObserve(\.count, by: listener) { listener, _, _ in
                listener.record("sub")
            },
        ]
        small.count = 1
        large.count = 1
        sub.label = "y"
        sub.count = 1
        #expect(listener.log == ["small", "large", "label", "sub"])
        #expect(SafeObservation.relations(of: sub).count == 2)
        #expect(tokens.allSatisfy { !$0.debugDescription.contains("<computed") })
        #expect(large.payload.3 == 4 && small.payload == 1)  // neighbouring fields untouched
    }

    /// A key path formed in generic code (a new object on each call) names
    /// the same property and dedupes with the literal.
    @Test func keyPathsFormedInGenericCode_dedupeWithLiterals() {
        let object = Counter()
        let listener = Listener()
        let literal = object.safeObserve(\.count, by: listener) { _, _, _ in }
        #expect(observeGenerically(object, by: listener) { _, _, _ in } == literal)
        #expect(SafeObservation.relations(of: object) == [literal])
    }
}

/// Forms `\.count` inside generic code: a new key-path object on each call.
private func observeGenerically<Root: Counter>(
    _ root: Root, by listener: Listener, _ handler: @escaping @Sendable (Listener, Root, ObservedChange<Int>) -> Void
) -> ObservationToken {
    root.safeObserve(\.count, by: listener, changeHandler: handler)
}

// @unchecked Sendable: test fixture; only `volume` is mutated, by one test.
private final class Settings: SafeObservable, @unchecked Sendable {
    static let shared = Settings()
    @Observed var volume = 1
}

// MARK: - Values a user can write

@Suite("Every public value")
struct PublicValuesTests {
    /// Every bit a user can set beyond the four public options (`.initial`
    /// is bit 2, left out so the expected deliveries stay the same).
    @Test(arguments: [UInt8(0x80), 0xF0, 0xFB])
    func unknownOptionBits_areIgnored_andTheObjectsDeathIsSafe(bits: UInt8) {
        let lifetime = LifetimeCounter()
        var object: Counter? = Counter()
        let listener = Listener()
        let options = ObservationOptions(rawValue: bits).union([.old, .new, .prior])
        let token = object!.safeObserve(\.count, by: listener, options: options) { listener, _, change in
            listener.record(describe(change))
            _ = Captured(lifetime)
        }
        // A relation like any other: listed, and delivered as documented.
        #expect(SafeObservation.relations(of: object!) == [token])
        object!.count = 1
        #expect(listener.log == ["0->nil prior", "0->1"])
        object = nil  // used to reach an unchecked downcast in teardown
        #expect(!token.isActive)
        #expect(SafeObservation.relations(observedBy: listener).isEmpty)
    }

    @Test func unknownOptionBits_onADerivedKeyPath_areIgnored() {
        var object: Counter? = Counter()
        let listener = Listener()
        let token = object!.safeObserve(
            \.description, by: listener, options: ObservationOptions(rawValue: 0xFB)
        ) { listener, _, change in listener.record(change.isPrior ? "prior" : "change") }
        #expect(SafeObservation.relations(of: object!) == [token])
        object!.count = 1
        #expect(listener.log == ["prior", "change"])
        object = nil
        #expect(!token.isActive)
    }
}

extension Counter: CustomStringConvertible {
    var description: String { "\(title): \(count)" }
}

// MARK: - Key paths whose equality is user code

/// A subscript argument whose `==` and `hash(into:)` call back into SafeObserve.
private struct ReentrantKey: Hashable, Sendable {
    let value: Int
    static let probe = Peer()
    static let comparisons = Atomic<Int>(0)

    static func == (lhs: ReentrantKey, rhs: ReentrantKey) -> Bool {
        comparisons.add(1, ordering: .relaxed)
        // Takes the registry's and the proxy's locks: a deadlock if either is held.
        _ = SafeObservation.relations(observedBy: probe)
        return lhs.value == rhs.value
    }

    func hash(into hasher: inout Hasher) {
        _ = SafeObservation.relations(observedBy: Self.probe)
        hasher.combine(value)
    }
}

private final class Store: SafeObservable {
    @Observed var items: [Int: String] = [:]
    let registrar = SafeObservationRegistrar()
    private var _extra: [Int: String] = [:]

    subscript(key: ReentrantKey) -> String? { items[key.value] }

    subscript(extra key: ReentrantKey) -> String? {
        get {
            registrar.access(self, keyPath: \.[extra: key])
            return _extra[key.value]
        }
        set {
            registrar.withMutation(of: self, keyPath: \.[extra: key]) { _extra[key.value] = newValue }
        }
    }
}

/// Runs `body` on another thread; `false` if it did not finish in time
/// (a deadlock: the thread is left behind).
private func finishes(within seconds: Double = 30, _ body: @escaping @Sendable () -> Void) -> Bool {
    let finished = Atomic<Bool>(false)
    DispatchQueue.global().async {
        body()
        finished.store(true, ordering: .releasing)
    }
    return settles(within: seconds) { finished.load(ordering: .acquiring) }
}

@Suite("Key paths with subscript arguments")
struct SubscriptKeyPathTests {
    @Test func dedupeAndRemoval_compareKeyPathsOutsideLocks() {
        let ok = finishes {
            let store = Store()
            let listener = Listener()
            let first = store.safeObserve(\.[ReentrantKey(value: 1)], by: listener) { _, _, _ in }
            let second = store.safeObserve(\.[ReentrantKey(value: 2)], by: listener) { _, _, _ in }
            // An equal key path (another instance) is the same relation.
            let again = store.safeObserve(\.[ReentrantKey(value: 1)], by: listener) { _, _, _ in }
            #expect(first == again)
            #expect(first != second)
            #expect(Set(SafeObservation.relations(observedBy: listener)) == [first, second])
            store.safeUnobserve(\.[ReentrantKey(value: 1)], by: listener)
            #expect(!first.isActive)
            #expect(second.isActive)
        }
        #expect(ok, "a key path's == ran under a SafeObserve lock and deadlocked")
        #expect(ReentrantKey.comparisons.load(ordering: .relaxed) > 0, "the test never compared key paths")
    }

    @Test func aRegistrarKeyedBySubscriptKeyPaths_hashesAndComparesOutsideItsLock() {
        let ok = finishes {
            let store = Store()
            let listener = Listener()
            store.safeObserve(\.[extra: ReentrantKey(value: 1)], by: listener) { listener, _, change in
                listener.record(change.newValue.flatMap { $0 } ?? "nil")
            }
            store.safeObserve(\.[extra: ReentrantKey(value: 2)], by: listener) { _, _, _ in }
            store[extra: ReentrantKey(value: 1)] = "one"
            store[extra: ReentrantKey(value: 2)] = "two"
            #expect(listener.log == ["one"])
        }
        #expect(ok, "a key path's == or hash ran under the registrar's lock and deadlocked")
    }
}

// MARK: - Misuse that used to be silent

private final class ComputedLifetimeListener: SafeObserver {
    var observerLifetime: ObserverLifetime { ObserverLifetime() }  // the mistake
}

private final class StorageSharingOwner: ObservationControllerOwner {
    let observationControllerStorage: ObservationControllerStorage
    let log = EventLog()
    init(sharing storage: ObservationControllerStorage) { observationControllerStorage = storage }
}

@Suite("Misuse is reported")
struct MisuseTests {
    @Test func aComputedObserverLifetime_isReported_andObservesNothing() {
        let messages = EventLog()
        let object = Counter()
        let listener = ComputedLifetimeListener()
        let token = _Diagnostics.withHandler {
            messages.record($0)
        } body: {
            object.safeObserve(\.count, by: listener) { _, _, _ in }
        }
        #expect(!token.isActive)
        #expect(messages.entries.count == 1)
        #expect(messages.entries.first?.contains("ComputedLifetimeListener") == true)
        #expect(messages.entries.first?.contains("stored") == true)
    }

    @Test func anObservationControllerStorageSharedByTwoOwners_isReported_andNeverDeliversToTheFirst() {
        let messages = EventLog()
        let storage = ObservationControllerStorage()
        let first = StorageSharingOwner(sharing: storage)
        let second = StorageSharingOwner(sharing: storage)
        let object = Counter()
        first.observationController.observe(object, keyPath: \.count) { owner, _, _ in owner.log.record("first") }
        _Diagnostics.withHandler {
            messages.record($0)
        } body: {
            second.observationController.observe(object, keyPath: \.count) { owner, _, _ in
                owner.log.record("second")
            }
        }
        object.count = 1
        #expect(messages.entries.count == 1)
        #expect(messages.entries.first?.contains("ObservationControllerStorage") == true)
        #expect(first.log.entries == ["first"])
        #expect(second.log.entries.isEmpty)
    }
}

// MARK: - Copies of the storage

@Suite("Copies of @Observed storage")
struct StorageCopyTests {
    @Test func aCopyOfTheStorage_neverMakesADeadObjectsRelationLookLive_andItsHandlerIsReleasedWhenNoticed() {
        let lifetime = LifetimeCounter()
        let listener = Listener()
        var object: Counter? = Counter()
        let token = object!.safeObserve(\.count, by: listener) { _, _, _ in _ = Captured(lifetime) }
        // `Mirror` copies every stored property, the storage (and its sentinel) included.
        let copies = Mirror(reflecting: object!).children.map(\.value)
        object = nil
        #expect(!token.isActive)
        #expect(token.listener == nil)
        #expect(SafeObservation.relations(observedBy: listener).isEmpty)
        withExtendedLifetime(copies) {}
    }
}

// MARK: - Identities and hashing

@Suite("Identities")
struct IdentityTests {
    @Test func tokensOfDistinctRelations_neverCompareEqual_evenWhenMemoryIsReused() {
        let object = Counter()
        let listener = Listener()
        var tokens: [ObservationToken] = []
        for _ in 0..<200 {
            let token = object.safeObserve(\.count, by: listener) { _, _, _ in }
            token.invalidate()
            tokens.append(token)
        }
        #expect(Set(tokens).count == tokens.count)
    }

    @Test(arguments: [6, 10, 16])
    func theThirtyTwoBitHash_spreadsAlignedAddressesOverEverySlot(bits: Int) {
        let slots = 1 << bits
        var hits = [Int](repeating: 0, count: slots)
        for index in 0..<(slots * 4) {
            let address = UInt32(0x1000_0000) &+ UInt32(index) &* 16  // consecutive heap objects
            let slot = _fibonacciHash(address &>> 4, bits: bits)
            #expect(slot >= 0 && slot < slots)
            hits[min(max(slot, 0), slots - 1)] += 1
        }
        #expect(hits.filter { $0 == 0 }.count <= slots / 8, "the 32-bit formula leaves slots unused")
        #expect(hits.max()! <= 12, "the 32-bit formula clusters")
    }

    @Test func theSixtyFourBitHash_matchesTheFormulaItReplaced() {
        for index in 0..<1_000 {
            let word = UInt64(0x7F00_1234_0000) &+ UInt64(index) &* 16
            let old = Int(truncatingIfNeeded: ((word &>> 4) &* 0x9E37_79B9_7F4A_7C15) &>> 58)
            #expect(_fibonacciHash(word &>> 4, bits: 6) == old)
        }
    }
}

// MARK: - Diagnostics are scoped

@Suite("Diagnostics handlers are scoped to their task")
struct DiagnosticsScopeTests {
    @Test func parallelTasksWithTheirOwnHandlers_eachSeeOnlyTheirOwnMessages() async {
        await withTaskGroup(of: (Int, [String]).self) { group in
            for index in 0..<8 {
                group.addTask {
                    let messages = EventLog()
                    _Diagnostics.withHandler {
                        messages.record($0)
                    } body: {
                        for _ in 0..<20 {
                            _Diagnostics.reportProgrammerError("message \(index)")
                        }
                    }
                    return (index, messages.entries)
                }
            }
            for await (index, messages) in group {
                #expect(messages == Array(repeating: "message \(index)", count: 20))
            }
        }
    }
}
