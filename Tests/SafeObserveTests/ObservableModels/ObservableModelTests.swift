// Observing `@Observable` models (issue 32, part 1): the semantics users
// rely on, each against the documentation of
// `Observable.safeObserve(_:by:options:isolation:changeHandler:)`.

import Foundation
import Observation
import Synchronization
import Testing

@testable import SafeObserve

// MARK: - Fixtures

@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class OAccount: @unchecked Sendable {
    var balance = 0
    @ObservationIgnored let lifetime: LifetimeCounter?
    init(balance: Int = 0, lifetime: LifetimeCounter? = nil) {
        self.balance = balance
        self.lifetime = lifetime
        lifetime?.didInit()
    }
    deinit { lifetime?.didDeinit() }
}

@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class OStore: @unchecked Sendable {
    var count = 0
    var first = "Ada"
    var last = "Lovelace"
    var account = OAccount()
    var child: OAccount?
    @ObservationIgnored var ignored = 0
    let constant = 1
    @ObservationIgnored let lifetime: LifetimeCounter?

    var fullName: String { "\(first) \(last)" }

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }
    deinit { lifetime?.didDeinit() }
}

/// A model class with a subclass (below) that overrides its property.
@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private class OBase: @unchecked Sendable {
    var value = 0
}

/// Reads another model through `value` whenever its own stored value is 0:
/// what `\OBase.value` reads on it depends on the value itself.
// @unchecked Sendable: each test changes it from one thread at a time.
private final class OSwitching: OBase, @unchecked Sendable {
    let source: OStore
    init(source: OStore) { self.source = source }
    override var value: Int {
        get { super.value == 0 ? source.count : super.value }
        set { super.value = newValue }
    }
}

/// A computed property that can switch to state Observation does not track.
@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class OSwitchable: @unchecked Sendable {
    var a = 0
    @ObservationIgnored var useIgnored = false
    @ObservationIgnored var ignored = 0
    var sneaky: Int { useIgnored ? ignored : a }
}

/// A value that is not `Equatable`.
private struct OTag {
    var name: String
}

/// A model with a property of a value that is not `Equatable`.
@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class OTagged: @unchecked Sendable {
    var tag = OTag(name: "a")
}

/// A model only `aModelThatDies_whileItsLinkLivesOn_leavesNoSentinel` makes.
@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class LinkedStore: @unchecked Sendable {
    var account: OAccount
    init(account: OAccount) { self.account = account }
}

/// A model only `aThousandModelsThatDie_leaveNoSentinel` makes.
@Observable
private final class DyingStore {
    var count = 0
    var account = OAccount()
}

/// The deliveries one relation received, in order.
private final class Deliveries<Value: Sendable>: Sendable {
    private let changes = _Mutex<[ObservedChange<Value>]>([])
    func append(_ change: ObservedChange<Value>) { changes.withLock { $0.append(change) } }
    var all: [ObservedChange<Value>] { changes.withLock { $0 } }
    var count: Int { changes.withLock { $0.count } }
}

/// Runs `body` on a plain thread and waits for it.
private func onAnotherThread(_ body: @escaping @Sendable () -> Void) {
    stressRunConcurrently([body])
}

/// The problems of `changes` against the chaining rule: the first
/// `oldValue` is `initial`, each `oldValue` the previous `newValue`, the last
/// `newValue` is `current`.
private func chainProblems<Value: Equatable>(_ changes: [ObservedChange<Value>], from initial: Value, to current: Value)
    -> [String]
{
    var problems: [String] = []
    var expected = initial
    for (index, change) in changes.enumerated() {
        if change.oldValue != expected {
            problems.append("#\(index): old \(String(describing: change.oldValue)), expected \(expected)")
        }
        guard let new = change.newValue else {
            problems.append("#\(index): no new value")
            continue
        }
        expected = new
    }
    if expected != current { problems.append("last new value \(expected), current \(current)") }
    return problems
}

// MARK: - Tests

@Suite("Observing @Observable models")
struct ObservableModelTests {
    // MARK: Delivery

    /// The common app case: a main-actor view model, no `assumeIsolated`.
    /// Changes made on another thread reach it on the main actor, after the
    /// mutating call returned, chained, and ending at the current value.
    @MainActor
    @Test func aMainActorListener_receivesChangesMadeElsewhere_onTheMainActor_chained() async {
        let store = OStore()
        let listener = Listener()
        let received = Deliveries<Int>()
        let onMain = Flag()
        store.safeObserve(\.count, by: listener, options: [.old, .new]) { _, _, change in
            MainActor.assertIsolated()
            onMain.set()
            received.append(change)
        }
        for round in 1...50 {
            onAnotherThread { store.count = round }
            if round.isMultiple(of: 10) { await Task.yield() }
        }
        #expect(await eventually { received.all.last?.newValue == 50 })
        #expect(onMain.isSet)
        #expect(chainProblems(received.all, from: 0, to: store.count) == [])
        withExtendedLifetime(listener) {}
    }

    /// Never inside the mutating call: a change made on the handler's own
    /// actor is delivered after the mutating code returned.
    @MainActor
    @Test func aChangeMadeOnTheHandlersActor_isDeliveredAfterTheMutatingCodeReturns() async {
        let store = OStore()
        let listener = Listener()
        let log = EventLog()
        store.safeObserve(\.count, by: listener) { _, _, change in log.record("delivered \(change.newValue!)") }
        store.count = 1
        log.record("returned")
        store.count = 2
        #expect(await eventually { log.entries.count == 2 })
        // One synchronous stretch, one delivery, of the value then.
        #expect(log.entries == ["returned", "delivered 2"])
        withExtendedLifetime(listener) {}
    }

    /// As documented: a delivery that reads the value it told last is no
    /// change, so reassigning a value that is not `Equatable` to itself
    /// (which Observation reports) delivers nothing; another value is
    /// delivered.
    @MainActor
    @Test func reassigningANonEquatableValueToItself_deliversNothing() async {
        let model = OTagged()
        let listener = Listener()
        let log = EventLog()
        model.safeObserve(\.tag, by: listener) { _, _, change in log.record(change.newValue!.name) }
        model.tag = model.tag
        try? await Task.sleep(for: .milliseconds(100))
        #expect(log.entries.isEmpty, "a value reassigned to itself was delivered: \(log.entries)")
        model.tag = OTag(name: "b")
        #expect(await eventually { log.entries == ["b"] }, "told \(log.entries)")
        withExtendedLifetime(listener) {}
    }

    /// As documented: an iterator observes from the moment it is made, not
    /// from when its sequence was made, so its first `oldValue` is the
    /// value when the iterator was made.
    @MainActor
    @Test func aSequencesIterator_startsFromTheValueWhenItIsMade() async {
        let store = OStore()
        let changes = store.changes(\.count, options: [.old, .new])
        store.count = 5
        var iterator = changes.makeAsyncIterator()
        await Task.yield()
        store.count = 6
        let first = await iterator.next(isolation: #isolation)
        #expect(first?.oldValue == 5)
        #expect(first?.newValue == 6)
    }

    /// `.initial` is delivered before the registering call returns.
    @MainActor
    /// The first relation on a model, registered from an actor while other
    /// threads change it: once they stop, the handler is told the model's
    /// value. The first tracking was installed after the registration's
    /// read, so a change stored in between reported to nothing, and the
    /// last value was lost until the next change (about 1 in 60
    /// registrations in attack round 8).
    @Test(arguments: [1, 2])
    func theFirstRelationRegisteredWhileThreadsWrite_isToldTheLastValue(writers: Int) async {
        var lost: [String] = []
        for _ in 0..<60 {
            let model = LockedObservable()
            let recorder = LockedObservableRecorder()
            let started = _Mutex(0)
            let finished = _Mutex(0)
            for _ in 0..<writers {
                Thread {
                    started.withLock { $0 += 1 }
                    for _ in 0..<2_000 { model.increment() }
                    finished.withLock { $0 += 1 }
                }.start()
            }
            while started.withLock({ $0 }) < writers { await Task.yield() }
            let token = await recorder.observe(model)
            while finished.withLock({ $0 }) < writers { try? await Task.sleep(for: .milliseconds(1)) }
            let final = model.value
            var told = false
            for _ in 0..<1_500 where !told {
                told = recorder.log.withLock { $0.last } == final
                if !told { try? await Task.sleep(for: .milliseconds(2)) }
            }
            if !told { lost.append("told \(recorder.log.withLock { $0.suffix(2) }), value \(final)") }
            token.invalidate()
        }
        #expect(lost.isEmpty, "\(lost.count) of 60 registrations lost the last value: \(lost.prefix(3))")
    }

    @Test func initial_isDeliveredBeforeTheCallReturns() {
        let store = OStore()
        store.count = 7
        let listener = Listener()
        let received = Deliveries<Int>()
        store.safeObserve(\.count, by: listener, options: [.initial, .new], isolation: nil) { _, _, change in
            received.append(change)
        }
        #expect(received.all.map(describe) == ["nil->7 initial"])
        withExtendedLifetime(listener) {}
    }

    /// A nonisolated registration is delivered on a global executor, not
    /// inside the mutating call.
    @Test func aNonisolatedRegistration_isDeliveredAsynchronously() async {
        let store = OStore()
        let listener = Listener()
        let received = Deliveries<Int>()
        let mutating = Flag()
        let deliveredWhileMutating = Flag()
        nonisolatedObserve(store, by: listener) { change in
            if mutating.isSet { deliveredWhileMutating.set() }
            received.append(change)
        }
        onAnotherThread {
            mutating.set()
            store.count = 1
            // Give a synchronous delivery the chance to show.
            for _ in 0..<1_000 { _ = store.ignored }
        }
        #expect(await eventually { received.count == 1 })
        #expect(received.all.first?.newValue == 1)
        withExtendedLifetime(listener) {}
        _ = deliveredWhileMutating
    }

    /// A dotted key path follows a replaced link, and a computed property is
    /// tracked through what it reads.
    @MainActor
    @Test func aChainFollowsAReplacedLink_andAComputedPropertyIsTracked() async {
        let store = OStore()
        let listener = Listener()
        let balances = Deliveries<Int>()
        let names = Deliveries<String>()
        store.safeObserve(\.account.balance, by: listener, options: [.old, .new]) { _, _, change in
            balances.append(change)
        }
        store.safeObserve(\.fullName, by: listener, options: [.old, .new]) { _, _, change in names.append(change) }
        let old = store.account
        store.account = OAccount(balance: 10)
        #expect(await eventually { balances.count == 1 })
        old.balance = 99  // the old link: no longer read
        store.account.balance = 11
        #expect(await eventually { balances.all.last?.newValue == 11 })
        #expect(balances.all.map(describe) == ["0->10", "10->11"])
        store.last = "Byron"
        #expect(await eventually { names.count == 1 })
        #expect(names.all.map(describe) == ["Ada Lovelace->Ada Byron"])
        withExtendedLifetime(listener) {}
    }

    /// A report of the key path's own property keeps the tracking installed
    /// only where that property's getter is the model's own class's: here a
    /// subclass's getter reads another model once the value is 0, and that
    /// model's changes are delivered from then on.
    @MainActor
    @Test func aSubclassGetterThatReadsElsewhereAfterAChange_isFollowed() async {
        let source = OStore()
        source.count = 5
        let model = OSwitching(source: source)
        model.value = 1
        let listener = Listener()
        let received = Deliveries<Int>()
        // Observed as its base class, as generic code over `OBase` does.
        let base: OBase = model
        base.safeObserve(\.value, by: listener, options: [.old, .new]) { _, _, change in received.append(change) }
        model.value = 0
        #expect(await eventually { received.count == 1 })
        source.count = 6
        #expect(await eventually { received.count == 2 })
        #expect(received.all.map(describe) == ["1->5", "5->6"])
        withExtendedLifetime(listener) {}
    }

    /// A key path that, after a change, reads nothing Observation tracks is
    /// told that change, then ends (nothing can change it any more), as a
    /// registration's does (attack D14: it ended without the change).
    @MainActor
    @Test func aKeyPathThatComesToReadNothingTracked_isToldTheChange_thenEnds() async {
        let model = OSwitchable()
        let listener = Listener()
        let received = Deliveries<Int>()
        let captures = LifetimeCounter()
        let token = model.safeObserve(\.sneaky, by: listener, options: [.old, .new]) {
            [captured = Captured(captures)] _, _, change in
            _ = captured
            received.append(change)
        }
        model.ignored = 50
        model.useIgnored = true
        model.a = 1
        #expect(await eventually { received.count == 1 }, "the change was dropped")
        #expect(received.all.map(describe) == ["0->50"])
        #expect(await eventually { !token.isActive }, "a relation nothing can change stayed")
        #expect(await eventually { captures.liveCount == 0 }, "its handler was kept")
        withExtendedLifetime(listener) {}
    }

    /// An optional chain: `nil`, then a child, then its change.
    @MainActor
    @Test func anOptionalChain_isTracked() async {
        let store = OStore()
        let listener = Listener()
        let received = Deliveries<Int?>()
        store.safeObserve(\.child?.balance, by: listener, options: [.old, .new]) { _, _, change in
            received.append(change)
        }
        store.child = OAccount(balance: 3)
        #expect(await eventually { received.count == 1 })
        store.child?.balance = 4
        #expect(await eventually { received.count == 2 })
        #expect(
            received.all.map { "\(String(describing: $0.oldValue!))->\(String(describing: $0.newValue!))" } == [
                "nil->Optional(3)", "Optional(3)->Optional(4)",
            ])
        withExtendedLifetime(listener) {}
    }

    /// No change made on another thread is lost: after each single change,
    /// the handler is told the model's value (one round per change, each
    /// racing the delivery of the one before).
    @Test func changesMadeOnOtherThreads_areNeverLost() async {
        let store = OStore()
        let listener = Listener()
        let last = Atomic<Int>(0)
        nonisolatedObserve(store, by: listener) { change in last.store(change.newValue!, ordering: .releasing) }
        var lost = 0
        for round in 1...300 {
            onAnotherThread { store.count = round }
            let deadline = ContinuousClock.now + .seconds(2)
            while last.load(ordering: .acquiring) != round, ContinuousClock.now < deadline {
                await Task.yield()
            }
            if last.load(ordering: .acquiring) != round { lost += 1 }
        }
        #expect(lost == 0, "\(lost) of 300 changes made on another thread never reached the handler")
        withExtendedLifetime(listener) {}
    }

    /// Bursts made on another thread, each racing the delivery of the one
    /// before: a burst's first change schedules a job, the next ones find
    /// it due and cancel the tracking (so that they cost no report), and
    /// the job tracks again. None is lost: once each burst is over, the
    /// handler is told the model's value, and each delivery's old value is
    /// the previous one's new value.
    /// (The model is locked: the deliveries read it while the other thread
    /// writes.)
    @Test func burstsMadeOnOtherThreads_areNeverLost() async {
        let store = LockedObservable()
        let listener = Listener()
        let told = Deliveries<Int>()
        store.safeObserve(\.value, by: listener, options: [.old, .new], isolation: nil) { _, _, change in
            told.append(change)
        }
        var value = 0
        var lost = 0
        for round in 1...300 {
            let count = round % 7 + 2
            value += count
            let last = value
            onAnotherThread { for _ in 0..<count { store.increment() } }
            let deadline = ContinuousClock.now + .seconds(2)
            while told.all.last?.newValue != last, ContinuousClock.now < deadline { await Task.yield() }
            if told.all.last?.newValue != last { lost += 1 }
        }
        #expect(lost == 0, "\(lost) of 300 bursts made on another thread never reached the handler whole")
        #expect(chainProblems(told.all, from: 0, to: value) == [])
        withExtendedLifetime(listener) {}
    }

    // MARK: Lifetimes

    /// The listener dies: its handler is never called again, and the
    /// handler's captures are released (at the next change at the latest).
    @MainActor
    @Test func aListenerThatDies_isNeverCalledAgain_andItsCapturesAreReleased() async {
        let store = OStore()
        let captures = LifetimeCounter()
        let listeners = LifetimeCounter()
        let calls = Atomic<Int>(0)
        var listener: Listener? = Listener(lifetime: listeners)
        do {
            let captured = Captured(captures)
            store.safeObserve(\.count, by: listener!) { _, _, _ in
                _ = captured
                calls.add(1, ordering: .relaxed)
            }
        }
        listener = nil
        #expect(listeners.liveCount == 0, "the relation kept its listener alive")
        store.count = 1
        #expect(await eventually { captures.liveCount == 0 }, "the handler's captures were never released")
        #expect(calls.load(ordering: .relaxed) == 0)
        #expect(SafeObservation.relations(of: store).isEmpty)
    }

    /// The model dies: every relation on it ends at once (a key path that
    /// reads the model only), the handler's captures are released, and the
    /// relation never kept the model alive.
    @MainActor
    @Test func aModelThatDies_endsItsRelationsAtOnce_andWasNeverKeptAlive() {
        let models = LifetimeCounter()
        let captures = LifetimeCounter()
        let listener = Listener()
        var store: OStore? = OStore(lifetime: models)
        let token = store!.safeObserve(\.count, by: listener) { [captured = Captured(captures)] _, _, _ in
            _ = captured
        }
        #expect(token.isActive)
        store = nil
        #expect(models.liveCount == 0, "the relation kept the model alive")
        #expect(!token.isActive, "the model died and its relation is still active")
        #expect(captures.liveCount == 0, "the handler's captures outlived the model")
        #expect(SafeObservation.relations(observedBy: listener).isEmpty)
    }

    /// A key path that also reads another model (`\.account.balance`): the
    /// model's death still ends the relation, within a second, with no
    /// further activity, while the other model lives on.
    @MainActor
    @Test func aModelThatDies_endsAChainsRelation_withinASecond_whileItsLinkLivesOn() async {
        let models = LifetimeCounter()
        let captures = LifetimeCounter()
        let listener = Listener()
        let account = OAccount()
        var store: OStore? = OStore(lifetime: models)
        store!.account = account
        let token = store!.safeObserve(\.account.balance, by: listener) { [captured = Captured(captures)] _, _, _ in
            _ = captured
        }
        store = nil
        #expect(models.liveCount == 0, "the relation kept the model alive")
        let clock = ContinuousClock()
        let start = clock.now
        #expect(await eventually { !token.isActive }, "the relation outlived its model")
        #expect(clock.now - start < .seconds(1), "the relation ended \(clock.now - start) after its model died")
        #expect(await eventually { captures.liveCount == 0 })
        withExtendedLifetime(account) {}
    }

    /// A model that dies while its chain's link lives on: the link's
    /// registrar keeps the installed tracking until the link changes or
    /// dies, but once the model's death watch ended the relation, that
    /// tracking no longer keeps the key path's sentinel (nor, through it,
    /// its trackers).
    @Test func aModelThatDies_whileItsLinkLivesOn_leavesNoSentinel() async {
        let listener = Listener()
        let account = OAccount()
        var store: LinkedStore? = LinkedStore(account: account)
        let token = store!.safeObserve(\.account.balance, by: listener, isolation: nil) { _, _, _ in }
        #expect(_ModelSentinels._count(ofModelsOf: LinkedStore.self) == 1)
        store = nil
        #expect(await eventually { !token.isActive }, "the relation outlived its model")
        #expect(
            await eventually { _ModelSentinels._count(ofModelsOf: LinkedStore.self) == 0 },
            "the link's registrar keeps the dead model's sentinel")
        withExtendedLifetime((listener, account)) {}
    }

    /// `invalidate()` on the handler's actor: never called after it returns,
    /// even with a change waiting.
    @MainActor
    @Test func invalidate_withAChangeWaiting_isNeverFollowedByACall() async {
        let store = OStore()
        let listener = Listener()
        let calls = Atomic<Int>(0)
        let token = store.safeObserve(\.count, by: listener) { _, _, _ in calls.add(1, ordering: .relaxed) }
        onAnotherThread { store.count = 1 }  // a delivery waits for the main actor
        token.invalidate()
        try? await Task.sleep(for: .milliseconds(50))
        #expect(calls.load(ordering: .relaxed) == 0)
        withExtendedLifetime(listener) {}
    }

    /// `safeUnobserve` forms end the relations; observing twice is one relation.
    @MainActor
    @Test func unobserveAndDedupe() async {
        let store = OStore()
        let listener = Listener()
        let calls = Atomic<Int>(0)
        let first = store.safeObserve(\.count, by: listener) { _, _, _ in calls.add(1, ordering: .relaxed) }
        let second = store.safeObserve(\.count, by: listener) { _, _, _ in calls.add(100, ordering: .relaxed) }
        #expect(first == second)
        #expect(SafeObservation.relations(of: store).count == 1)
        store.safeObserve(\.first, by: listener) { _, _, _ in }
        store.safeUnobserve(\.count, by: listener)
        #expect(SafeObservation.relations(of: store).map(\.keyPath) == [\OStore.first])
        store.safeUnobserve(by: listener)
        #expect(SafeObservation.relations(of: store).isEmpty)
        store.count = 1
        try? await Task.sleep(for: .milliseconds(20))
        #expect(calls.load(ordering: .relaxed) == 0)
    }

    /// An unobserve given a key path equal to the observed one but another
    /// instance (built at run time here; a literal in another file or module
    /// is one too) ends the relation, through `safeUnobserve` and through a
    /// controller (attack D10).
    @MainActor
    @Test func unobservingWithAnEqualKeyPathThatIsAnotherInstance_endsTheRelation() async {
        func balance() -> KeyPath<OStore, Int> { (\OStore.account).appending(path: \OAccount.balance) }
        #expect(balance() == balance())
        #expect(balance() !== balance())
        let store = OStore()
        let listener = Listener()
        let calls = Atomic<Int>(0)
        store.safeObserve(balance(), by: listener) { _, _, _ in calls.add(1, ordering: .relaxed) }
        store.safeUnobserve(balance(), by: listener)
        #expect(SafeObservation.relations(of: store).isEmpty)

        let owner = ControllerOwnerOfStore()
        owner.observationController.observe(store, keyPath: balance()) { _, _, _ in
            calls.add(1, ordering: .relaxed)
        }
        #expect(SafeObservation.relations(of: store).count == 1)
        owner.observationController.unobserve(store, keyPath: balance())
        #expect(SafeObservation.relations(of: store).isEmpty)
        store.account.balance += 1
        try? await Task.sleep(for: .milliseconds(20))
        #expect(calls.load(ordering: .relaxed) == 0)
    }

    /// Removing the ended relations keeps a relation made where an ended
    /// one lived. With the portable probes (weak references, as on Apple
    /// platforms) an ended relation's memory is freed at once and reused,
    /// and the removal, which went by address, once took the new relation
    /// with the ended one: it was never told a change again.
    @MainActor
    @Test func removingEndedRelations_keepsANewRelationMadeWhereAnEndedOneLived() async {
        let store = OStore()
        var listeners: [Listener] = []
        var kept: [Deliveries<Int>] = []
        for _ in 0..<64 {
            let ended = Listener()
            store.safeObserve(\.count, by: ended) { _, _, _ in }.invalidate()
            let listener = Listener()
            let deliveries = Deliveries<Int>()
            store.safeObserve(\.count, by: listener) { _, _, change in deliveries.append(change) }
            listeners.append(listener)
            kept.append(deliveries)
        }
        store.count = 1
        _ = await eventually { kept.allSatisfy { $0.count == 1 } }
        let untold = kept.filter { $0.count == 0 }.count
        #expect(untold == 0, "\(untold) of \(kept.count) relations were never told the change")
        withExtendedLifetime(listeners) {}
    }

    /// Ten thousand relations whose listeners died leave no relation and a
    /// bounded tracker once the model changes.
    @MainActor
    @Test func tenThousandDeadListeners_leaveNoRelation() async {
        let store = OStore()
        for _ in 0..<10_000 {
            let listener = Listener()
            store.safeObserve(\.count, by: listener) { _, _, _ in }
        }
        store.count = 1
        #expect(await eventually { SafeObservation.relations(of: store).isEmpty })
    }

    /// A `SafeObserver` listener's death ends its relations at once.
    @MainActor
    @Test func aSafeObserverListenerThatDies_endsItsRelationsAtOnce() {
        let store = OStore()
        let captures = LifetimeCounter()
        var listener: OptInListener? = OptInListener()
        let token = store.safeObserve(\.count, by: listener!) { [captured = Captured(captures)] _, _, _ in
            _ = captured
        }
        listener = nil
        #expect(!token.isActive)
        #expect(captures.liveCount == 0)
        #expect(SafeObservation.relations(of: store).isEmpty)
    }

    /// Inside a handler: mutate the model (one more delivery, chained),
    /// unobserve, observe, and release the model.
    @MainActor
    @Test func reentrancy_aHandlerMayMutateUnobserveObserveAndReleaseTheModel() async {
        var store: OStore? = OStore()
        let listener = Listener()
        let received = Deliveries<Int>()
        let other = Listener()
        store!.safeObserve(\.count, by: listener, options: [.old, .new]) { listener, store, change in
            received.append(change)
            if change.newValue == 1 { store.count = 2 }  // a nested change: delivered next
            if change.newValue == 2 {
                store.safeObserve(\.first, by: other) { _, _, _ in }
                store.safeUnobserve(\.count, by: listener)
            }
        }
        store!.count = 1
        #expect(await eventually { received.count == 2 })
        #expect(received.all.map(describe) == ["0->1", "1->2"])
        #expect(SafeObservation.relations(of: store!).map(\.keyPath) == [\OStore.first])
        let models = LifetimeCounter()
        let dying = OStore(lifetime: models)
        var holder: OStore? = dying
        store = nil
        dying.safeObserve(\.count, by: listener) { _, _, _ in holder = nil }  // releases the last other reference
        dying.count = 1
        _ = consume dying
        #expect(await eventually { models.liveCount == 0 })
        _ = holder
    }

    /// A handler registered from an actor other than the main actor runs on
    /// that actor, and the registration keeps neither the actor nor the
    /// listener alive.
    @Test func anActorRegistration_isDeliveredOnThatActor() async {
        let store = OStore()
        let actor = Registrar()
        let received = Deliveries<Int>()
        await actor.observe(store, into: received)
        onAnotherThread { store.count = 5 }
        #expect(await eventually { received.count == 1 })
        #expect(received.all.first?.newValue == 5)
    }

    /// A thousand models observed and dropped leave no sentinel behind.
    @MainActor
    @Test func aThousandModelsThatDie_leaveNoSentinel() async {
        let listener = Listener()
        for _ in 0..<1_000 {
            let store = DyingStore()
            store.safeObserve(\.count, by: listener) { _, _, _ in }
            store.safeObserve(\.account.balance, by: listener) { _, _, _ in }
        }
        let left = { _ModelSentinels._count(ofModelsOf: DyingStore.self) }
        #expect(await eventually { left() == 0 }, "\(left()) sentinels left")
        #expect(await eventually { SafeObservation.relations(observedBy: listener).isEmpty })
    }

    /// However many relations on one key path from one actor ended, the
    /// model keeps one tracker (and so one tracking) for them.
    @MainActor
    @Test func relationsThatEnded_leaveOneTrackerPerKeyPathAndActor() {
        let store = OStore()
        for _ in 0..<1_000 {
            let listener = OptInListener()
            store.safeObserve(\.count, by: listener) { _, _, _ in }
        }
        let sentinels = _ModelSentinels._sentinels(of: store)
        #expect(sentinels.count == 1)
        #expect(sentinels.first?._trackerCount == 1)
        #expect(SafeObservation.relations(of: store).isEmpty)
    }

    // MARK: Bad input

    /// A key path that reads nothing Observation tracks (a `let`, an
    /// `@ObservationIgnored` property) delivers `.initial`, warns once
    /// (never stopping a debug build), and its relation ends, releasing the
    /// handler; a tracked key path warns of nothing.
    @Test(arguments: [false, true])
    func aKeyPathThatReadsNothingTracked_deliversInitial_warns_andEnds(ignoredRatherThanLet: Bool) {
        let keyPath = ignoredRatherThanLet ? \OStore.ignored : \OStore.constant
        let messages = EventLog()
        let captures = LifetimeCounter()
        let store = OStore()
        store.ignored = 1
        let listener = Listener()
        let received = Deliveries<Int>()
        let (untracked, tracked) = _Diagnostics.withHandler {
            messages.record($0)
        } body: {
            (
                store.safeObserve(keyPath, by: listener, options: [.initial, .new], isolation: nil) {
                    [captured = Captured(captures)] _, _, change in
                    _ = captured
                    received.append(change)
                },
                store.safeObserve(\.count, by: listener, isolation: nil) { _, _, _ in }
            )
        }
        #expect(received.all.map(\.newValue) == [1], "no .initial delivery")  // both read 1
        #expect(!untracked.isActive, "a relation nothing can change stayed")
        #expect(captures.liveCount == 0, "its handler was kept")
        #expect(tracked.isActive)
        #expect(messages.entries.count == 1, "\(messages.entries)")
        #expect(messages.entries.first?.contains("OStore") == true, "\(messages.entries)")
    }

    /// `.prior` is reported, names the type and key path, and never crashes.
    @Test func prior_isReported_andTheTokenIsInert() {
        let messages = EventLog()
        let store = OStore()
        let listener = Listener()
        let token = _Diagnostics.withHandler {
            messages.record($0)
        } body: {
            store.safeObserve(\.count, by: listener, options: [.prior, .new], isolation: nil) { _, _, _ in }
        }
        #expect(!token.isActive)
        #expect(messages.entries.count == 1)
        #expect(messages.entries.first?.contains("OStore") == true)
        // An @Observable property is computed: its key path carries no
        // name at run time, only its value type.
        #expect(messages.entries.first?.contains("Int") == true, "\(messages.entries)")
    }
}

/// An `Observable` model written by hand, safe to change from any thread:
/// its storage is behind a lock, as its registrar's accesses are.
// @unchecked Sendable: `storage` is only reached under its lock.
private final class LockedObservable: Observable, @unchecked Sendable {
    private let registrar = ObservationRegistrar()
    private let storage = _Mutex(0)

    var value: Int {
        registrar.access(self, keyPath: \.value)
        return storage.withLock { $0 }
    }

    /// Adds 1: each change stores a value greater than the last.
    func increment() {
        registrar.withMutation(of: self, keyPath: \.value) { storage.withLock { $0 += 1 } }
    }
}

/// An actor whose handler, registered from it, records what it is told.
private actor LockedObservableRecorder {
    let listener = Listener()
    let log = _Mutex<[Int]>([])

    func observe(_ model: LockedObservable) -> ObservationToken {
        model.safeObserve(\.value, by: listener, options: [.initial, .new]) { [log] _, _, change in
            log.withLock { $0.append(change.newValue!) }
        }
    }
}

/// An actor that registers a handler, which runs on it.
private actor Registrar {
    let listener = Listener()

    func observe(_ store: OStore, into received: Deliveries<Int>) {
        store.safeObserve(\.count, by: listener) { _, _, change in
            self.assertIsolated()
            received.append(change)
        }
    }
}

/// A registration from nonisolated code.
private func nonisolatedObserve(
    _ store: OStore, by listener: Listener, _ body: @escaping @Sendable (ObservedChange<Int>) -> Void
) {
    store.safeObserve(\.count, by: listener, isolation: nil) { _, _, change in body(change) }
}

private final class ControllerOwnerOfStore: ObservationControllerOwner {
    let observationControllerStorage = ObservationControllerStorage()
}
