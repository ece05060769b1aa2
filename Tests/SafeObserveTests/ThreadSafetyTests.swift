import Dispatch
import Synchronization
import Testing

@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#endif

/// Semantics 7: registration, removal, emission and the death of either side
/// may happen concurrently on any threads. Each test loops (one clean run
/// under a sanitizer proves little); SAFEOBSERVE_STRESS_ITERATIONS scales them.
@Suite("Thread safety under stress")
struct ThreadSafetyTests {
    static let rounds: Int = {
        guard let text = getenv("SAFEOBSERVE_STRESS_ITERATIONS").map({ String(cString: $0) }),
            let value = Int(text), value > 0
        else { return 5 }
        return value
    }()

    @Test func concurrentEmissionOnDifferentObjects_deliversExactCounts() {
        for _ in 0..<(20 * Self.rounds) {
            let objects = (0..<4).map { _ in Counter() }
            let listeners = (0..<3).map { _ in Listener() }
            let count = AtomicCounter()
            for object in objects {
                for listener in listeners {
                    object.safeObserve(\.count, by: listener) { _, _, _ in count.increment() }
                }
            }
            let shared = UncheckedSendable(objects)
            DispatchQueue.concurrentPerform(iterations: objects.count) { index in
                let object = shared.value[index]  // one object per thread
                for value in 1...250 { object.count = value }
            }
            #expect(count.value == objects.count * listeners.count * 250)
            withExtendedLifetime(listeners) {}
        }
    }

    @Test func listenersDyingOnOtherThreadsDuringEmission_areNeverCalledAfterTheirDeinit() {
        for _ in 0..<(20 * Self.rounds) {
            let counter = Counter()
            let lifetimes = LifetimeCounter()
            let late = AtomicCounter()
            var listeners: [OptInListener] = []
            for _ in 0..<16 {
                let listener = OptInListener(lifetime: lifetimes)
                let deinitialized = AtomicCounter()
                listener.onDeinit = { _ in deinitialized.store(1) }
                counter.safeObserve(\.count, by: listener) { _, _, _ in
                    if deinitialized.value != 0 { late.increment() }
                }
                listeners.append(listener)
            }
            let box = ReleaseBox(listeners)
            listeners = []
            let shared = UncheckedSendable(counter)
            DispatchQueue.concurrentPerform(iterations: 2) { worker in
                if worker == 0 {
                    for value in 1...400 { shared.value.count = value }  // the only mutator
                } else {
                    box.releaseAll()
                }
            }
            #expect(late.value == 0, "a handler ran after its listener's deinit")
            #expect(lifetimes.liveCount == 0, "Listener leaked")
            #expect(SafeObservation.relations(of: counter).isEmpty)
        }
    }

    @Test func invalidatingFromAnotherThread_stopsLaterChanges() {
        for _ in 0..<(50 * Self.rounds) {
            let counter = Counter()
            let listener = Listener()
            let started = AtomicCounter()  // changes begun by the emitting thread
            let lastSeen = AtomicCounter()  // highest change delivered
            let token = counter.safeObserve(\.count, by: listener) { _, _, change in
                lastSeen.store(change.newValue!)
            }
            let invalidatedAfter = AtomicCounter()
            let shared = UncheckedSendable(counter)
            DispatchQueue.concurrentPerform(iterations: 2) { worker in
                if worker == 0 {
                    for value in 1...2_000 {
                        started.store(value)
                        shared.value.count = value  // the only mutator
                    }
                } else {
                    // A bounded pause, never a wait on the other worker:
                    // concurrentPerform may run both on one thread.
                    var spin = 0
                    while spin < 20_000 && started.value < 200 { spin += 1 }
                    token.invalidate()
                    invalidatedAfter.store(started.value)
                }
            }
            // Only a change already begun when invalidate returned may still arrive.
            #expect(lastSeen.value <= invalidatedAfter.value + 1)
            #expect(!token.isActive)
        }
    }

    @Test func registeringTheSameRelationFromManyThreads_makesOneRelation() {
        for _ in 0..<(50 * Self.rounds) {
            let counter = Counter()
            let listener = Peer()
            let tokens = TokenCollector()
            let shared = UncheckedSendable(counter)  // read by every thread, mutated by none
            DispatchQueue.concurrentPerform(iterations: 8) { _ in
                tokens.add(shared.value.safeObserve(\.count, by: listener) { _, _, _ in })
            }
            #expect(SafeObservation.relations(of: counter).count == 1)
            #expect(Set(tokens.all.map(ObjectIdentifier.init)).count == 1, "dedupe returned different tokens")
        }
    }

    @Test func objectsDyingWhileTokensAreInvalidatedElsewhere_leakNothing() {
        for _ in 0..<(20 * Self.rounds) {
            let counters = LifetimeCounter()
            let captures = LifetimeCounter()
            let listener = OptInListener()
            var objects = (0..<32).map { _ in Counter(lifetime: counters) }
            let tokens = TokenCollector()
            for object in objects {
                let captured = Captured(captures)
                tokens.add(object.safeObserve(\.count, by: listener) { _, _, _ in _ = captured })
            }
            let box = ReleaseBox(objects)
            objects = []
            let sharedListener = UncheckedSendable(listener)
            DispatchQueue.concurrentPerform(iterations: 3) { worker in
                switch worker {
                case 0: box.releaseAll()
                case 1: for token in tokens.all { token.invalidate() }
                default: SafeObservation.removeAll(observedBy: sharedListener.value)
                }
            }
            #expect(counters.liveCount == 0, "Observed object leaked")
            #expect(captures.liveCount == 0, "Handler leaked")
            #expect(SafeObservation.relations(observedBy: listener).isEmpty)
        }
    }

    /// Regression: sweeps used to take a transient strong reference to each
    /// listener they inspected, under the channel's lock. When that was the
    /// last reference, the listener's deinit ran under the lock and, if it
    /// unobserved (as migrated KVO code does), deadlocked.
    @Test func listenersWhoseDeinitUnobserves_dyingDuringSweeps_doNotDeadlock() {
        for _ in 0..<(20 * Self.rounds) {
            let counter = Counter()  // never mutated: concurrent registrations only read it
            let lifetimes = LifetimeCounter()
            var doomed: [Listener] = []
            for _ in 0..<64 {
                let listener = Listener(lifetime: lifetimes)
                listener.onDeinit = { [counter] listener in counter.safeUnobserve(by: listener) }
                counter.safeObserve(\.count, by: listener) { _, _, _ in }
                doomed.append(listener)
            }
            let box = ReleaseBox(doomed)
            doomed = []
            let shared = UncheckedSendable(counter)
            DispatchQueue.concurrentPerform(iterations: 3) { worker in
                if worker == 0 {
                    box.releaseAll()
                } else {
                    for _ in 0..<64 {
                        let peer = Peer()
                        shared.value.safeObserve(\.count, by: peer) { _, _, _ in }  // sweeps two old relations
                    }
                }
            }
            #expect(lifetimes.liveCount == 0, "Listener leaked")
        }
    }

    /// The same, with SafeObserver listeners and an empty deinit: their
    /// ObserverLifetime removes their relations from the channel, whose lock
    /// a sweep that retained them would have been holding.
    @Test func optInListenersDyingDuringSweeps_doNotDeadlock() {
        for _ in 0..<(20 * Self.rounds) {
            let counter = Counter()  // never mutated: concurrent registrations only read it
            let lifetimes = LifetimeCounter()
            var doomed: [OptInListener] = []
            for _ in 0..<64 {
                let listener = OptInListener(lifetime: lifetimes)
                counter.safeObserve(\.count, by: listener) { _, _, _ in }
                doomed.append(listener)
            }
            let box = ReleaseBox(doomed)
            doomed = []
            let shared = UncheckedSendable(counter)
            DispatchQueue.concurrentPerform(iterations: 3) { worker in
                if worker == 0 {
                    while box.releaseOne() {}
                } else {
                    for _ in 0..<64 {
                        shared.value.safeObserve(\.count, by: Peer()) { _, _, _ in }  // sweeps two old relations
                    }
                }
            }
            #expect(lifetimes.liveCount == 0, "Listener leaked")
        }
    }

    @Test func mixedChurn_endsWithNothingAlive() {
        for round in 0..<(10 * Self.rounds) {
            let counters = LifetimeCounter()
            let listeners = LifetimeCounter()
            let captures = LifetimeCounter()
            do {
                // Mutation and registration of one object share its lock (registration
                // reads the property); everything else is unsynchronized.
                let objects = UncheckedSendable((0..<8).map { _ in LockedCounter(Counter(lifetime: counters)) }).value
                DispatchQueue.concurrentPerform(iterations: 4) { worker in
                    var generator = SplitMix64(seed: UInt64(round * 31 + worker))
                    var mine: [RecordingListener] = []
                    for _ in 0..<300 {
                        let object = objects[Int(generator.next() % UInt64(objects.count))]
                        switch generator.next() % 6 {
                        case 0, 1:
                            let listener: RecordingListener =
                                generator.next() % 2 == 0
                                ? Listener(lifetime: listeners) : OptInListener(lifetime: listeners)
                            let captured = Captured(captures)
                            let sharedListener = UncheckedSendable(listener)
                            object.locked { counter in
                                let listener = sharedListener.value
                                counter.safeObserve(\.count, by: listener, options: [.old, .new, .prior]) { _, _, _ in
                                    _ = captured
                                }
                            }
                            mine.append(listener)
                        case 2:
                            object.locked { counter in counter.count += 1 }
                        case 3:
                            if let listener = mine.popLast() { object.counter.safeUnobserve(by: listener) }
                        case 4:
                            if !mine.isEmpty { mine.remove(at: Int(generator.next() % UInt64(mine.count))) }
                        default:
                            if let listener = mine.last { SafeObservation.removeAll(observedBy: listener) }
                        }
                    }
                }
            }
            _ProxyTable.shared.sweepAll()
            #expect(counters.liveCount == 0, "Observed object leaked")
            #expect(listeners.liveCount == 0, "Listener leaked")
            #expect(captures.liveCount == 0, "Handler leaked")
        }
    }
}

// MARK: - Support

private final class AtomicCounter: Sendable {
    private let storage = Atomic<Int>(0)
    var value: Int { storage.load(ordering: .acquiring) }
    func increment() { storage.add(1, ordering: .relaxed) }
    func store(_ value: Int) { storage.store(value, ordering: .releasing) }
}

private final class TokenCollector: Sendable {
    private let tokens = _Mutex<[ObservationToken]>([])
    func add(_ token: ObservationToken) { tokens.withLock { $0.append(token) } }
    var all: [ObservationToken] { tokens.withLock { $0 } }
}

// @unchecked Sendable: `counter`'s properties are only touched under `lock`.
private final class LockedCounter: @unchecked Sendable {
    let counter: Counter
    private let lock = _Mutex<UInt8>(0)
    init(_ counter: Counter) { self.counter = counter }
    func locked(_ body: (Counter) -> Void) { lock.withLock { _ in body(counter) } }
}
