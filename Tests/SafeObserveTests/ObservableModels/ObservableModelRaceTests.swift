// `@Observable` models under writers on other threads, and at scale (issue
// 32; defects found by the public-API attack): an unchanged value is never a
// delivery, `.initial` comes first and alone, and registration does not
// slow down with the relations already on the key path.

import Observation
import Synchronization
import Testing

@testable import SafeObserve

/// A model whose property is behind a lock, so that writer threads and the
/// delivery's read do not race (only Observation's timing is under test).
@Observable
private final class LockedStore: Sendable {
    @ObservationIgnored private let storage = _Mutex(0)

    var count: Int {
        get {
            access(keyPath: \.count)
            return storage.withLock { $0 }
        }
        set {
            withMutation(keyPath: \.count) { storage.withLock { $0 = newValue } }
        }
    }
}

/// A locked store whose `gatedCount` read can be held once, after it read
/// the count: a registration's read, stopped between reading its value and
/// filing its relation.
@Observable
private final class GatedStore: Sendable {
    @ObservationIgnored private let storage = _Mutex(0)
    @ObservationIgnored private let gate = _Mutex((armed: false, entered: false, open: false))

    var count: Int {
        get {
            access(keyPath: \.count)
            return storage.withLock { $0 }
        }
        set {
            withMutation(keyPath: \.count) { storage.withLock { $0 = newValue } }
        }
    }

    var gatedCount: Int {
        let value = count
        let holds = gate.withLock { gate in
            defer { gate.armed = false }
            gate.entered = gate.entered || gate.armed
            return gate.armed
        }
        // Long: the test opens it once a job on the global executor ran,
        // which a parallel test run may keep waiting for many seconds.
        if holds { _ = settles(within: 600) { gate.withLock { $0.open } } }
        return value
    }

    func arm() { gate.withLock { $0.armed = true } }
    var isHeld: Bool { gate.withLock { $0.entered && !$0.open } }
    func open() { gate.withLock { $0.open = true } }
}

/// What one relation was told, and whether calls overlapped.
private final class Told: Sendable {
    private let state = _Mutex<(changes: [ObservedChange<Int>], inFlight: Int, overlaps: Int)>(([], 0, 0))
    func enter() {
        state.withLock {
            if $0.inFlight > 0 { $0.overlaps += 1 }
            $0.inFlight += 1
        }
    }
    func leave(_ change: ObservedChange<Int>) {
        state.withLock {
            $0.changes.append(change)
            $0.inFlight -= 1
        }
    }
    var changes: [ObservedChange<Int>] { state.withLock { $0.changes } }
    var overlaps: Int { state.withLock { $0.overlaps } }
    var inFlight: Int { state.withLock { $0.inFlight } }
}

@Suite("@Observable models: writers on other threads, and scale")
struct ObservableModelRaceTests {
    /// A writer stores strictly increasing values: no delivery has
    /// `oldValue == newValue` (an equal value is no change), and the last is
    /// the model's value.
    @Test func increasingStoresFromAnotherThread_neverDeliverAnUnchangedValue() async {
        for _ in 0..<5 {
            let store = LockedStore()
            let listener = Listener()
            let told = Told()
            store.safeObserve(\.count, by: listener, options: [.old, .new], isolation: nil) { _, _, change in
                told.enter()
                told.leave(change)
            }
            await Task.detached { for value in 1...20_000 { store.count = value } }.value
            #expect(await eventually { told.changes.last?.newValue == 20_000 })
            let unchanged = told.changes.filter { $0.oldValue == $0.newValue }
            #expect(
                unchanged.isEmpty, "told \(unchanged.count) unchanged values, e.g. \(unchanged.prefix(3).map(describe))"
            )
            withExtendedLifetime(listener) {}
        }
    }

    /// Registered from nonisolated code with `.initial` while another
    /// thread keeps writing: the `.initial` call is the first, and no
    /// change is delivered while it runs.
    @Test func aSlowInitialCall_isFirst_andAlone_whileAnotherThreadWrites() async {
        let store = LockedStore()
        let stop = Flag()
        let stopped = Flag()
        // A plain thread: a task spinning on the cooperative pool could
        // starve this test's own task.
        _detachThread {
            var value = 0
            while !stop.isSet {
                value += 1
                store.count = value
            }
            stopped.set()
        }
        var problems: [String] = []
        for run in 0..<50 {
            let listener = Listener()
            let told = Told()
            let token = store.safeObserve(\.count, by: listener, options: [.initial, .old, .new], isolation: nil) {
                _, _, change in
                told.enter()
                if change.isInitial {  // a slow first call
                    let end = ContinuousClock.now + .milliseconds(2)
                    while ContinuousClock.now < end {}
                }
                told.leave(change)
            }
            try? await Task.sleep(for: .milliseconds(1))
            token.invalidate()
            _ = await eventually { told.inFlight == 0 }
            if told.changes.first?.isInitial != true { problems.append("run \(run): a change came before .initial") }
            if told.overlaps > 0 { problems.append("run \(run): a change was delivered during the .initial call") }
            withExtendedLifetime(listener) {}
        }
        stop.set()
        #expect(await eventually { stopped.isSet })
        #expect(problems.isEmpty, "\(problems.prefix(5))")
    }

    /// Registering a relation costs about the same with 20,000 relations
    /// already on the key path as with 8.
    @Test func registration_doesNotScaleWithTheKeyPathsRelations() {
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on a store of its own.
        let ratio = smallestRatios(below: 4) {
            let store = LockedStore()
            var listeners: [Listener] = []
            func register(_ count: Int) {
                for _ in 0..<count {
                    let listener = Listener()
                    store.safeObserve(\.count, by: listener, isolation: nil) { _, _, _ in }
                    listeners.append(listener)
                }
            }
            func measured() -> Duration { fastest(of: 5) { register(100) } }
            register(8)
            let early = measured()
            register(20_000)
            let late = measured()
            withExtendedLifetime(listeners) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "100 registrations took \(describe(last.late)) after 20,000, \(describe(last.early)) after 8 (last attempt)"
        )
    }

    /// A change stored while a registration had read its value but not yet
    /// filed its relation, and delivered meanwhile to the key path's other
    /// relations, is delivered to the new one too (attack D11: it was told
    /// `.initial` and then nothing, until some later change).
    @Test func aChangeDeliveredWhileARegistrationFilesItsRelation_reachesItToo() async {
        let store = GatedStore()
        let first = Told()
        let second = Told()
        store.safeObserve(\.gatedCount, by: first, isolation: nil) { first, _, change in
            first.enter()
            first.leave(change)
        }
        store.arm()
        await stressRunConcurrentlyOffThePool([
            {
                store.safeObserve(\.gatedCount, by: second, options: [.initial, .new], isolation: nil) {
                    second, _, change in
                    second.enter()
                    second.leave(change)
                }
            },
            {
                _ = settles(within: 600) { store.isHeld }
                store.count = 1
                // The other relation's job ran, and re-armed the tracking
                // past the change. It runs on the cooperative pool, which
                // the tests running in parallel may keep busy for a minute.
                _ = settles(within: 600) { first.changes.last?.newValue == 1 }
                store.open()
            },
        ])
        #expect(first.changes.last?.newValue == 1)
        #expect(await eventually { second.changes.last?.newValue == 1 }, "told \(second.changes)")
        #expect(second.changes.first?.isInitial == true)
        #expect(second.changes.first?.newValue == 0)
    }
}
