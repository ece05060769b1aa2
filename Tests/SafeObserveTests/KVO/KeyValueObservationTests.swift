import Synchronization
import Testing

@testable import SafeObserve

/// `object.observe(_:options:changeHandler:)`, KVO's shape: the returned
/// observation owns the relation.
@Suite("KeyValueObservation")
struct KeyValueObservationTests {
    @Test func theObservationDeliversWhileKept_andEndsWhenDeinitialized() {
        let counter = Counter()
        let received = _Mutex<[Int?]>([])
        var observation: KeyValueObservation? = counter.observe(\.count, options: [.new]) { _, change in
            received.withLock { $0.append(change.newValue) }
        }
        counter.count = 1
        #expect(observation!.isActive)
        observation = nil  // KVO code stops observing this way
        counter.count = 2
        #expect(received.withLock { $0 } == [1])
        #expect(SafeObservation.relations(of: counter).isEmpty)
    }

    @Test func invalidate_endsTheRelation_idempotently_andReleasesTheHandler() {
        let counter = Counter()
        let captures = LifetimeCounter()
        let calls = Atomic<Int>(0)
        let observation: KeyValueObservation
        do {
            let captured = Captured(captures)
            observation = counter.observe(\.count, options: [.new]) { _, _ in
                withExtendedLifetime(captured) { _ = calls.add(1, ordering: .relaxed) }
            }
        }
        counter.count = 1
        observation.invalidate()
        observation.invalidate()
        counter.count = 2
        #expect(calls.load(ordering: .relaxed) == 1)
        #expect(!observation.isActive)
        #expect(captures.deinitCount == 1, "the handler and its captures are released at invalidate()")
    }

    /// KVO code often stops observing from the handler (`observation = nil`
    /// once a condition holds): the handler finishes running with its
    /// captures alive, and nothing is delivered after.
    @Test func releasingTheObservationInsideItsOwnHandler_endsIt_afterTheHandlerReturns() {
        final class Screen {
            var observation: KeyValueObservation?
            var seen: [Int] = []
        }
        let counter = Counter()
        let captures = LifetimeCounter()
        let screen = Screen()
        do {
            let captured = Captured(captures)
            screen.observation = counter.observe(\.count, options: [.new]) { [unowned screen] _, change in
                screen.observation = nil  // drops the last reference to the observation, and so to this closure
                // The closure and what it captured are still alive here.
                withExtendedLifetime(captured) {
                    screen.seen.append(change.newValue! * 10 + captured.lifetime.liveCount)
                }
            }
        }
        counter.count = 1
        counter.count = 2
        #expect(screen.seen == [11])
        #expect(captures.deinitCount == 1, "released once the handler returned")
        #expect(SafeObservation.relations(of: counter).isEmpty)
    }

    /// The same with `invalidate()` inside the handler, and with other
    /// observations of the property (before and after it) still delivered.
    @Test func invalidatingInsideItsOwnHandler_endsOnlyThatObservation() {
        final class Box { var observation: KeyValueObservation? }
        let counter = Counter()
        let log = _Mutex<[String]>([])
        let before = counter.observe(\.count, options: [.new]) { _, change in
            log.withLock { $0.append("before \(change.newValue!)") }
        }
        let box = Box()
        box.observation = counter.observe(\.count, options: [.new]) { [unowned box] _, change in
            log.withLock { $0.append("self \(change.newValue!)") }
            box.observation?.invalidate()
        }
        let after = counter.observe(\.count, options: [.new]) { _, change in
            log.withLock { $0.append("after \(change.newValue!)") }
        }
        counter.count = 1
        counter.count = 2
        #expect(log.withLock { $0 } == ["before 1", "self 1", "after 1", "before 2", "after 2"])
        #expect(!box.observation!.isActive && before.isActive && after.isActive)
    }

    @Test func defaultOptionsAreKVOs_noValues() {
        let counter = Counter()
        let changes = _Mutex<[String]>([])
        let observation = counter.observe(\.count) { _, change in
            changes.withLock {
                $0.append("\(String(describing: change.newValue)) \(String(describing: change.oldValue))")
            }
        }
        counter.count = 1
        #expect(changes.withLock { $0 } == ["nil nil"])
        withExtendedLifetime(observation) {}
    }

    @Test func theHandlerReceivesTheObject_oldAndNewValues_andInitial() {
        let counter = Counter()
        let changes = _Mutex<[String]>([])
        let observation = counter.observe(\.count, options: [.initial, .old, .new]) { object, change in
            precondition(object === counter)
            let old = change.oldValue.map(String.init) ?? "-"
            let flag = change.isInitial ? " initial" : ""
            changes.withLock { $0.append("\(old)->\(change.newValue!)\(flag)") }
        }
        counter.count = 5
        #expect(changes.withLock { $0 } == ["-->0 initial", "0->5"])
        withExtendedLifetime(observation) {}
    }

    /// `.prior`, as in KVO: a notification before each change (`isPrior`,
    /// the old value if `.old` was asked for, no new value), then the change;
    /// for a single property and for a dotted key path alike.
    @Test func priorNotifications_precedeEachChange_withTheOldValue() {
        let counter = Counter()
        let account = Account()
        let person = Person(account: account)
        let changes = _Mutex<[String]>([])
        func describe(_ change: ObservedChange<Int>) -> String {
            let old = change.oldValue.map(String.init) ?? "-"
            let new = change.newValue.map(String.init) ?? "-"
            return change.isPrior ? "prior \(old)->\(new)" : "\(old)->\(new)"
        }
        let single = counter.observe(\.count, options: [.prior, .old, .new]) { _, change in
            changes.withLock { $0.append("count " + describe(change)) }
        }
        let dotted = person.observe(\.account.balance, options: [.prior, .old, .new]) { _, change in
            changes.withLock { $0.append("balance " + describe(change)) }
        }
        counter.count = 1
        account.balance = 7
        #expect(
            changes.withLock { $0 } == [
                "count prior 0->-", "count 0->1", "balance prior 0->-", "balance 0->7",
            ])
        withExtendedLifetime((single, dotted)) {}
    }

    @Test func theObjectDyingFirst_endsTheObservation_andIsNotKeptAlive() {
        let lifetime = LifetimeCounter()
        var counter: Counter? = Counter(lifetime: lifetime)
        let observation = counter!.observe(\.count, options: [.new]) { _, _ in }
        counter = nil
        #expect(lifetime.deinitCount == 1, "the observation does not keep the object alive")
        #expect(!observation.isActive)
        observation.invalidate()  // after the object died: harmless
    }

    /// Every observation's relation has one shared internal listener, whose
    /// bookkeeping is dropped when all the objects it observed died (unless
    /// a test running meanwhile observes too); an observation made after
    /// that works as the first one did.
    @Test func observationsMadeAfterEveryObservedObjectDied_deliverAsTheFirstDid() {
        for round in 0..<3 {
            let received = Atomic<Int>(0)
            var observations: [KeyValueObservation] = []
            var counters: [Counter] = (0..<4).map { _ in Counter() }
            for counter in counters {
                observations.append(
                    counter.observe(\.count, options: [.new]) { _, _ in received.add(1, ordering: .relaxed) })
            }
            for counter in counters { counter.count += 1 }
            #expect(received.load(ordering: .relaxed) == 4, "round \(round)")
            counters = []  // every observed object dies: every relation ends
            #expect(observations.allSatisfy { !$0.isActive }, "round \(round)")
            observations = []  // ending ended relations: nothing to do
        }
    }

    /// Observing an object from inside its own `deinit` is refused, and
    /// reported naming the type: the observation is inert (never active,
    /// never called, `.initial` included) and safe to invalidate and release.
    @Test func observingAnObjectFromItsOwnDeinit_returnsAnInertObservation() {
        let messages = EventLog()
        let calls = Atomic<Int>(0)
        let kept = _Mutex<KeyValueObservation?>(nil)
        var object: ObservesItselfInDeinit? = ObservesItselfInDeinit { object in
            let observation = object.observe(\.count, options: [.new, .initial]) { _, _ in
                calls.add(1, ordering: .relaxed)
            }
            kept.withLock { $0 = observation }
            object.count = 1
        }
        // Observed once already: its bookkeeping exists when it dies.
        object!.observe(\.count) { _, _ in }.invalidate()
        _Diagnostics.withHandler {
            messages.record($0)
        } body: {
            object = nil
        }
        let observation = kept.withLock { $0 }
        #expect(observation?.isActive == false)
        #expect(calls.load(ordering: .relaxed) == 0)
        #expect(messages.entries.count == 1)
        #expect(messages.entries.first?.contains("ObservesItselfInDeinit") == true)
        #expect(messages.entries.first?.contains("deinit") == true)
        observation?.invalidate()
        observation?.invalidate()
        kept.withLock { $0 = nil }  // releasing an inert observation: nothing to end
    }

    @Test func dottedOptionalAndComputedKeyPaths() {
        let person = Person()
        let names = _Mutex<[String]>([])
        let balances = _Mutex<[Int]>([])
        let childNames = _Mutex<[String?]>([])
        let full = person.observe(\.fullName, options: [.new]) { _, change in
            names.withLock { $0.append(change.newValue!) }
        }
        let dotted = person.observe(\.account.balance, options: [.new]) { _, change in
            balances.withLock { $0.append(change.newValue!) }
        }
        let optional = person.observe(\.child?.first, options: [.new]) { _, change in
            childNames.withLock { $0.append(change.newValue!) }
        }
        person.first = "Grace"
        person.account.balance = 10
        person.account = Account(balance: 20)
        person.child = Person()
        person.child?.first = "Lin"
        #expect(names.withLock { $0 } == ["Grace Lovelace"])
        #expect(balances.withLock { $0 } == [10, 20])
        #expect(childNames.withLock { $0 } == ["Ada", "Lin"])
        withExtendedLifetime((full, dotted, optional)) {}
    }

    @Test func anObservationStoredInTheObservedObject_doesNotLeak() {
        final class SelfWatching: SafeObservable {
            @Observed var count = 0
            var observation: KeyValueObservation?
            let lifetime: LifetimeCounter
            init(lifetime: LifetimeCounter) {
                self.lifetime = lifetime
                lifetime.didInit()
            }
            deinit { lifetime.didDeinit() }
        }
        let lifetime = LifetimeCounter()
        do {
            let object = SelfWatching(lifetime: lifetime)
            object.observation = object.observe(\.count, options: [.new]) { object, change in
                _ = object.count
            }
            object.count = 1
        }
        #expect(lifetime.deinitCount == 1)
    }

    // MARK: The differences "Migrating from KVO" lists, through this surface

    @Test func eachObserveCall_isARelationOfItsOwn_asInKVO_andInitialGoesOnlyToTheNewOne() {
        let counter = Counter()
        let log = _Mutex<[String]>([])
        let first = counter.observe(\.count, options: [.initial, .new]) { _, change in
            log.withLock { $0.append("first \(change.newValue!)\(change.isInitial ? " initial" : "")") }
        }
        counter.count = 1
        let second = counter.observe(\.count, options: [.initial, .new]) { _, change in
            log.withLock { $0.append("second \(change.newValue!)\(change.isInitial ? " initial" : "")") }
        }
        counter.count = 2
        #expect(
            log.withLock { $0 } == ["first 0 initial", "first 1", "second 1 initial", "first 2", "second 2"])
        #expect(SafeObservation.relations(of: counter).count == 2)
        withExtendedLifetime((first, second)) {}
    }

    @Test func invalidatingMoreOftenThanObserving_isANoOp() {
        let counter = Counter()
        let observation = counter.observe(\.count) { _, _ in }
        for _ in 0..<3 { observation.invalidate() }
        #expect(SafeObservation.relations(of: counter).isEmpty)
    }

    @Test func unknownOptionBits_areIgnored() {
        let counter = Counter()
        let values = _Mutex<[Int?]>([])
        let observation = counter.observe(\.count, options: ObservationOptions(rawValue: 0b1000_0001)) { _, change in
            values.withLock { $0.append(change.newValue) }
        }
        counter.count = 4
        #expect(values.withLock { $0 } == [4])
        withExtendedLifetime(observation) {}
    }

    @Test func aKeyPathWithASubscript_works() {
        final class Board: SafeObservable {
            @Observed var cells = [0, 0, 0]
        }
        let board = Board()
        let values = _Mutex<[Int]>([])
        let observation = board.observe(\.cells[1], options: [.new]) { _, change in
            values.withLock { $0.append(change.newValue!) }
        }
        board.cells[1] = 7
        board.cells[0] = 1
        #expect(values.withLock { $0 } == [7, 7])  // a derived key path delivers its value on each change it reads
        withExtendedLifetime(observation) {}
    }

    // MARK: One shared listener, distinct relations

    @Test func twoObservationsOfOneDerivedKeyPath_areTwoRelations_endedIndependently() {
        let person = Person(account: Account(balance: 1))
        let log = _Mutex<[String]>([])
        var first: KeyValueObservation? = person.observe(\.account.balance, options: .new) { _, change in
            log.withLock { $0.append("first \(change.newValue!)") }
        }
        let second = person.observe(\.account.balance, options: .new) { _, change in
            log.withLock { $0.append("second \(change.newValue!)") }
        }
        person.account.balance = 2
        first = nil
        person.account.balance = 3
        #expect(log.withLock { $0 } == ["first 2", "second 2", "second 3"])
        #expect(first == nil && second.isActive)
    }

    /// Every observation shares one internal listener: ending one, or many,
    /// never touches another's relation, and nothing is left afterwards.
    @Test func manyObservationsOfOneProperty_endInAnyOrder_andLeaveNothing() {
        let counter = Counter()
        let calls = _Mutex(0)
        var observations: [KeyValueObservation?] = (0..<200).map { _ in
            counter.observe(\.count) { _, _ in calls.withLock { $0 += 1 } }
        }
        counter.count = 1
        #expect(calls.withLock { $0 } == 200)
        var random = SplitMix64(seed: 7)
        for _ in 0..<150 {
            let index = random.next(observations.count)
            if random.next(2) == 0 { observations[index]?.invalidate() } else { observations[index] = nil }
        }
        let live = observations.filter { $0?.isActive == true }.count
        calls.withLock { $0 = 0 }
        counter.count = 2
        #expect(calls.withLock { $0 } == live)
        #expect(SafeObservation.relations(of: counter).count == live)
        observations.removeAll()
        counter.count = 3
        #expect(calls.withLock { $0 } == live, "no relation outlives its observation")
        #expect(SafeObservation.relations(of: counter).isEmpty)
    }

    @Test @MainActor func anObservationMadeOnTheMainActor_deliversThere_andEndsOnRelease() async {
        let counter = SendableCounter()
        let values = _Mutex<[Int]>([])
        var observation: KeyValueObservation? = counter.observe(\.count, options: .new) { _, change in
            MainActor.preconditionIsolated()
            values.withLock { $0.append(change.newValue!) }
        }
        counter.count = 1  // on the main actor: delivered at once
        #expect(values.withLock { $0 } == [1])
        await Task.detached { counter.count = 2 }.value
        #expect(await eventually { values.withLock { $0 } == [1, 2] })
        observation = nil
        await Task.detached { counter.count = 3 }.value
        try? await Task.sleep(for: .milliseconds(20))
        #expect(values.withLock { $0 } == [1, 2])
        #expect(observation == nil)
    }
}

/// Changed from one task at a time by the main-actor test above.
private final class SendableCounter: SafeObservable, @unchecked Sendable {
    // @unchecked Sendable: the test changes it from one task at a time.
    @Observed var count = 0
}

/// Runs `onDeinit` with itself from inside its `deinit`.
private final class ObservesItselfInDeinit: SafeObservable {
    @Observed var count = 0
    private let onDeinit: (ObservesItselfInDeinit) -> Void

    init(onDeinit: @escaping (ObservesItselfInDeinit) -> Void) {
        self.onDeinit = onDeinit
    }

    deinit { onDeinit(self) }
}
