import CSafeObserveRuntime
import Dispatch
import Synchronization
import Testing

@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#endif

/// A model shared between actors, as an app's models are: changed on a
/// background actor, observed from the main actor.
private final class SharedModel: SafeObservable, @unchecked Sendable {
    // @unchecked Sendable: the tests change it from one task at a time.
    @Observed var count = 0
    @Observed var title = ""
    let lifetime: LifetimeCounter?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }

    deinit { lifetime?.didDeinit() }
}

/// A main-actor listener, not Sendable: a view model.
@MainActor
private final class ViewModel {
    var seen: [Int] = []
    var changes: [ObservedChange<Int>] = []
    let lifetime: LifetimeCounter?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }

    deinit { lifetime?.didDeinit() }
}

/// Something a handler captures, to check that it is released.
private final class Payload: Sendable {}

/// Changes `model` on another thread and waits for it, busily, so that the
/// calling actor stays occupied: deliveries hopping to it stay queued behind
/// the caller until it suspends.
///
/// The task reaches the model weakly, so that once this returns it holds
/// nothing (the task itself may take a moment longer to be released).
private func changeElsewhere(_ model: SharedModel, _ body: @escaping @Sendable (SharedModel) -> Void) {
    let done = Flag()
    let box = WeakModel(model)
    Task.detached {
        if let model = box.model { body(model) }
        done.set()
    }
    while !done.isSet { sched_yield() }
}

// @unchecked Sendable: written once, in init; weak loads are atomic.
private final class WeakModel: @unchecked Sendable {
    weak var model: SharedModel?
    init(_ model: SharedModel) { self.model = model }
}

/// Lets the main actor run what is queued on it: yields, then waits for a
/// job enqueued from another thread now (jobs of equal priority run in order).
@MainActor
private func settleMainActor() async {
    for _ in 0..<20 { await Task.yield() }
    await Task.detached { await MainActor.run {} }.value
    for _ in 0..<20 { await Task.yield() }
}

@MainActor
@Suite("Handlers isolated to the registering actor")
struct IsolatedHandlerTests {
    @Test func aMainActorListener_receivesChangesMadeOnADetachedTask_inOrder_onTheMainActor() async {
        let model = SharedModel()
        let view = ViewModel()
        model.safeObserve(\.count, by: view) { view, _, change in
            MainActor.preconditionIsolated("delivered off the main actor")
            view.seen.append(change.newValue!)
        }
        await Task.detached {
            for value in 1...200 { model.count = value }
        }.value
        #expect(await eventually { view.seen.count == 200 })
        #expect(view.seen == Array(1...200))
    }

    @Test func aChangeMadeOnTheHandlersActor_isDeliveredSynchronously() {
        let model = SharedModel()
        let view = ViewModel()
        model.safeObserve(\.count, by: view, options: [.old, .new]) { view, model, change in
            #expect(model.count == change.newValue, "delivered before the store")
            view.seen.append(change.newValue!)
        }
        model.count = 1
        #expect(view.seen == [1])
        model.count = 2
        #expect(view.seen == [1, 2])
    }

    /// Threading.md: once `dispatchMain()` parked the main thread (Swift
    /// Testing parks it), the main actor's jobs run on a thread standing in
    /// for it; a change made there outside a main-actor job — in a
    /// main-queue block — hops: each change reaches the main-actor handler
    /// after the block returned, in order.
    @Test func aChangeMadeInAMainQueueBlock_onTheThreadStandingInForTheMainThread_hops() async {
        let model = SharedModel()
        let view = ViewModel()
        let log = EventLog()
        model.safeObserve(\.count, by: view) { view, _, change in
            log.record("delivered \(change.newValue!)")
            view.seen.append(change.newValue!)
        }
        let isMainThread = _Mutex<Bool?>(nil)
        DispatchQueue.main.async {
            isMainThread.withLock { $0 = csafeobserve_isMainThread() }
            model.count = 1
            log.record("stored 1")
            model.count = 2
            log.record("stored 2")
        }
        #expect(await eventually { view.seen.count == 2 }, "the changes never reached the handler")
        #expect(isMainThread.withLock { $0 } == false, "the block ran on the real main thread")
        #expect(log.entries == ["stored 1", "stored 2", "delivered 1", "delivered 2"])
        #expect(view.seen == [1, 2])
    }

    @Test func aSameActorChange_isDeliveredAfterTheChangesStillQueued() {
        let model = SharedModel()
        let view = ViewModel()
        model.safeObserve(\.count, by: view) { view, _, change in view.seen.append(change.newValue!) }
        changeElsewhere(model) { model in
            model.count = 1
            model.count = 2
        }
        #expect(view.seen.isEmpty, "a change made elsewhere ran synchronously off the actor")
        model.count = 3
        #expect(view.seen == [1, 2, 3])
    }

    @Test func initialIsDeliveredSynchronously_duringRegistration() {
        let model = SharedModel()
        model.count = 7
        let view = ViewModel()
        model.safeObserve(\.count, by: view, options: [.initial, .new]) { view, _, change in
            view.seen.append(change.newValue!)
        }
        #expect(view.seen == [7])
    }

    @Test func aQueuedDelivery_isDroppedAfterInvalidate_andTheHandlersCapturesAreReleasedAtOnce() async {
        let model = SharedModel()
        let view = ViewModel()
        var payload: Payload? = Payload()
        weak var weakPayload: Payload?
        weakPayload = payload
        let token = model.safeObserve(\.count, by: view) { [payload] view, _, change in
            _ = payload
            view.seen.append(change.newValue!)
        }
        payload = nil
        changeElsewhere(model) { $0.count = 1 }
        token.invalidate()
        #expect(weakPayload == nil, "the ended relation's handler is still alive")
        await settleMainActor()
        #expect(view.seen.isEmpty)
    }

    @Test func aHandlerEndingTheRelation_dropsTheChangesQueuedBehindIt() async {
        let model = SharedModel()
        let view = ViewModel()
        var token: ObservationToken?
        token = model.safeObserve(\.count, by: view) { view, _, change in
            view.seen.append(change.newValue!)
            token?.invalidate()
        }
        changeElsewhere(model) { model in
            model.count = 1
            model.count = 2
            model.count = 3
        }
        await settleMainActor()
        #expect(view.seen == [1])
    }

    @Test func aQueuedDelivery_isDroppedAfterTheListenerDied_andRetainsIt_not() async {
        let model = SharedModel()
        let lifetime = LifetimeCounter()
        var view: ViewModel? = ViewModel(lifetime: lifetime)
        weak var weakView: ViewModel?
        weakView = view
        var payload: Payload? = Payload()
        weak var weakPayload: Payload?
        weakPayload = payload
        let calls = Flag()
        model.safeObserve(\.count, by: view!) { [payload] _, _, _ in
            _ = payload
            calls.set()
        }
        payload = nil
        changeElsewhere(model) { $0.count = 1 }
        view = nil
        #expect(weakView == nil, "a queued delivery kept the listener alive")
        await settleMainActor()
        #expect(!calls.isSet, "delivered to a dead listener")
        #expect(await eventually { weakPayload == nil }, "the dead listener's handler is still alive")
        #expect(SafeObservation.relations(of: model).isEmpty)
        #expect(lifetime.liveCount == 0)
    }

    @Test func aQueuedDelivery_isDroppedAfterTheObjectDied_andRetainsIt_not() async {
        let lifetime = LifetimeCounter()
        var model: SharedModel? = SharedModel(lifetime: lifetime)
        weak var weakModel: SharedModel?
        weakModel = model
        let view = ViewModel()
        var payload: Payload? = Payload()
        weak var weakPayload: Payload?
        weakPayload = payload
        model!.safeObserve(\.count, by: view) { [payload] view, _, change in
            _ = payload
            view.seen.append(change.newValue!)
        }
        payload = nil
        changeElsewhere(model!) { $0.count = 1 }
        model = nil
        #expect(weakModel == nil, "a queued delivery kept the object alive")
        #expect(weakPayload == nil, "the dead object's relation's handler is still alive")
        await settleMainActor()
        #expect(view.seen.isEmpty)
        #expect(SafeObservation.relations(observedBy: view).isEmpty)
    }

    @Test func coalesced_mergesWaitingChanges_intoTheFirstOldAndTheLatestNewValue() async {
        let model = SharedModel()
        let view = ViewModel()
        model.safeObserve(\.count, by: view, options: [.old, .new, .coalesced]) { view, _, change in
            view.changes.append(change)
        }
        changeElsewhere(model) { model in
            for value in 1...5 { model.count = value }
        }
        await settleMainActor()
        #expect(view.changes == [ObservedChange(newValue: 5, oldValue: 0)])
        // Once delivered, the next change waits on its own.
        changeElsewhere(model) { model in
            model.count = 6
            model.count = 7
        }
        await settleMainActor()
        #expect(view.changes.last == ObservedChange(newValue: 7, oldValue: 5))
        #expect(view.changes.count == 2)
    }

    @Test func withoutCoalesced_everyChangeIsDelivered() async {
        let model = SharedModel()
        let view = ViewModel()
        model.safeObserve(\.count, by: view, options: [.old, .new]) { view, _, change in
            view.changes.append(change)
        }
        changeElsewhere(model) { model in
            for value in 1...5 { model.count = value }
        }
        await settleMainActor()
        #expect(view.changes == (1...5).map { ObservedChange(newValue: $0, oldValue: $0 - 1) })
    }

    @Test func prior_madeElsewhere_arrivesBeforeItsChange_withTheOldValue() async {
        let model = SharedModel()
        let view = ViewModel()
        model.safeObserve(\.count, by: view, options: [.old, .new, .prior]) { view, _, change in
            view.changes.append(change)
        }
        changeElsewhere(model) { $0.count = 1 }
        await settleMainActor()
        #expect(
            view.changes == [
                ObservedChange(newValue: nil, oldValue: 0, isPrior: true), ObservedChange(newValue: 1, oldValue: 0),
            ])
    }

    /// A change made on the actor while one made elsewhere waits comes
    /// after its own prior notification; with `.coalesced` it merges into
    /// the waiting change, whose prior stands for both (attack round 9, F4:
    /// the prior was dropped and the change delivered on its own).
    @Test(arguments: [false, true])
    func aChangeMadeOnTheActorWhileOneWaits_keepsItsPrior(coalesced: Bool) async {
        let model = SharedModel()
        let view = ViewModel()
        let options: ObservationOptions = coalesced ? [.old, .new, .prior, .coalesced] : [.old, .new, .prior]
        model.safeObserve(\.count, by: view, options: options) { view, _, change in
            view.changes.append(change)
        }
        changeElsewhere(model) { $0.count = 1 }  // queued: this test holds the main actor
        model.count = 2  // made on the main actor: delivered now, after the waiting change
        let expected: [ObservedChange<Int>] =
            coalesced
            ? [ObservedChange(newValue: nil, oldValue: 0, isPrior: true), ObservedChange(newValue: 2, oldValue: 0)]
            : [
                ObservedChange(newValue: nil, oldValue: 0, isPrior: true), ObservedChange(newValue: 1, oldValue: 0),
                ObservedChange(newValue: nil, oldValue: 1, isPrior: true), ObservedChange(newValue: 2, oldValue: 1),
            ]
        #expect(view.changes == expected)
        await settleMainActor()
        #expect(view.changes == expected, "a change was delivered again, or late")
    }

    @Test func derivedKeyPaths_hopToo() async {
        let model = SharedModel()
        let view = ViewModel()
        model.safeObserve(\.title.count, by: view) { view, _, change in
            MainActor.preconditionIsolated()
            view.seen.append(change.newValue!)
        }
        await Task.detached { model.title = "abc" }.value
        #expect(await eventually { view.seen == [3] })
    }

    @Test func reentrancy_aHandlerMayMutateUnobserveAndObserve_onItsActor() async {
        let model = SharedModel()
        let view = ViewModel()
        model.safeObserve(\.count, by: view) { view, model, change in
            view.seen.append(change.newValue!)
            if change.newValue! < 3 { model.count += 1 }  // synchronous: on the actor
            if change.newValue! == 3 {
                model.safeUnobserve(\.count, by: view)
                model.safeObserve(\.title, by: view) { view, _, _ in view.seen.append(-1) }
            }
        }
        await Task.detached { model.count = 1 }.value
        #expect(await eventually { view.seen == [1, 2, 3] })
        await Task.detached {
            model.count = 10
            model.title = "x"
        }.value
        #expect(await eventually { view.seen == [1, 2, 3, -1] })
    }

    @Test func anActorListener_receivesChangesOnItsExecutor() async {
        let model = SharedModel()
        let accumulator = Accumulator()
        await accumulator.observe(model)
        await Task.detached {
            for value in 1...50 { model.count = value }
        }.value
        var total = 0
        for _ in 0..<2_000 {
            total = await accumulator.seen.count
            if total == 50 { break }
            try? await Task.sleep(for: .milliseconds(2))
        }
        #expect(await accumulator.seen == Array(1...50))
    }

    @Test func anActorListener_thatDies_isNotKeptAliveByItsRelations() async {
        let model = SharedModel()
        let lifetime = LifetimeCounter()
        var accumulator: Accumulator? = Accumulator(lifetime: lifetime)
        await accumulator!.observe(model)
        await Task.detached { model.count = 1 }.value
        accumulator = nil
        #expect(await eventually { lifetime.liveCount == 0 })
        await Task.detached { model.count = 2 }.value
        #expect(SafeObservation.relations(of: model).isEmpty || lifetime.liveCount == 0)
    }

    @Test func aControllerOfAMainActorObserver_deliversOnTheMainActor_withHandlersAndActions() async {
        let badge = Badge()
        let model = SharedModel()
        badge.controller.observe(model, keyPath: \.count) { badge, _, change in
            MainActor.preconditionIsolated()
            badge.values.append(change.newValue!)
        }
        badge.controller.observe(model, keyPath: \.title, action: Badge.titleChanged)
        let other = SharedModel()
        badge.controller.observe(other, keyPaths: \.count, \.title, options: .new) { badge, _, change in
            MainActor.preconditionIsolated()
            badge.keyPathChanges += 1
        }
        await Task.detached {
            model.count = 1
            model.title = "a"
            other.count = 1
            other.title = "a"
        }.value
        #expect(await eventually { badge.values == [1] && badge.titles == 1 && badge.keyPathChanges == 2 })
        model.count = 2  // on the main actor: synchronous
        #expect(badge.values == [1, 2])
    }

    @Test func anActorWithACustomExecutor_getsItsChangesThere_andTheCheckNeverTraps() async {
        let model = SharedModel()
        let queued = QueueActor()
        await queued.observe(model)
        await Task.detached {
            for value in 1...20 { model.count = value }
        }.value
        var seen: [Int] = []
        for _ in 0..<2_000 {
            seen = await queued.seen
            if seen.count == 20 { break }
            try? await Task.sleep(for: .milliseconds(2))
        }
        #expect(seen == Array(1...20))
        #expect(await queued.changeHere(model, to: 21) == Array(1...21), "a change on the actor was not synchronous")
    }

    @Test func theSameActorCheck_ofOlderRuntimes_comparesExecutorsWithoutTrapping() async {
        // Runtimes before Swift 6.2 have no non-trapping query: SafeObserve
        // compares the running executor's identity there. Checked here on a
        // newer runtime, against the query it replaces.
        let main = MainActor.shared.unownedExecutor
        #expect(_isCurrentExecutorByIdentity(main), "the main actor's own task")
        #expect(_isCurrentExecutor(main, isMainActor: true))
        let accumulator = Accumulator()
        let other = Accumulator()
        #expect(await accumulator.sees(accumulator.unownedExecutor) == (true, true))
        #expect(await accumulator.sees(other.unownedExecutor) == (false, false))
        #expect(await accumulator.sees(main) == (false, false))
        let detached = await Task.detached {
            (_isCurrentExecutorByIdentity(main), _isCurrentExecutor(main, isMainActor: true))
        }.value
        #expect(detached == (false, false))
    }

    /// The main-actor check answers without the runtime off the main thread
    /// in a nonisolated task's job: the same as the runtime, in every
    /// context (a main-actor task, a nonisolated task, a default actor's and
    /// a custom executor's jobs, a thread outside any task).
    @Test func theMainActorCheck_answersAsTheRuntimeDoes_inEveryContext() async {
        let main = MainActor.shared.unownedExecutor
        let answers: @Sendable () -> [Bool] = {
            [_isCurrentExecutor(main, isMainActor: true), _runtimeIsCurrentExecutor(main)]
        }
        #expect(await MainActor.run { answers() } == [true, true])
        #expect(await Task.detached { answers() }.value == [false, false])
        #expect(await Task { @concurrent in answers() }.value == [false, false], "a nonisolated task")
        #expect(await Accumulator().running(answers) == [false, false], "a default actor's job")
        #expect(await ExecutorActor().running(answers) == [false, false], "a custom executor's job")
        let outside = _Mutex<[Bool]>([])
        await stressRunConcurrentlyOffThePool([{ outside.withLock { $0 = answers() } }])
        #expect(outside.withLock { $0 } == [false, false], "a thread outside any task")
    }

    @Test func aGlobalActorListener_receivesChangesOnItsActor_inOrder() async {
        let model = SharedModel()
        let listener = await BackgroundListener.make(observing: model)
        await Task.detached {
            for value in 1...50 { model.count = value }
        }.value
        var seen: [Int] = []
        for _ in 0..<2_000 {
            seen = await listener.seen
            if seen.count == 50 { break }
            try? await Task.sleep(for: .milliseconds(2))
        }
        #expect(seen == Array(1...50))
    }

    @Test func anActorListenerRegisteredFromOutside_getsItsInitialValueOnItself() async {
        let model = SharedModel()
        model.count = 4
        let accumulator = Accumulator()
        // Registered from the main actor: `.initial` hops to the accumulator.
        model.safeObserve(\.count, by: accumulator, options: [.initial, .new]) { accumulator, _, change in
            accumulator.append(change.newValue!)
        }
        var seen: [Int] = []
        for _ in 0..<2_000 {
            seen = await accumulator.seen
            if !seen.isEmpty { break }
            try? await Task.sleep(for: .milliseconds(2))
        }
        #expect(seen == [4])
    }

    @Test func changesMadeOnPlainThreadsOutsideAnyTask_hopWithoutTrapping() async {
        // No task, no executor: the runtime's own check would consult
        // checkIsolated() on older runtimes and trap; here the change hops.
        let model = SharedModel()
        let view = ViewModel()
        let accumulator = Accumulator()
        model.safeObserve(\.count, by: view) { view, _, change in
            MainActor.preconditionIsolated()
            view.seen.append(change.newValue!)
        }
        await accumulator.observe(model)
        stressRunConcurrently([{ for value in 1...20 { model.count = value } }])
        #expect(await eventually { view.seen == Array(1...20) })
        var seen: [Int] = []
        for _ in 0..<2_000 {
            seen = await accumulator.seen
            if seen.count == 20 { break }
            try? await Task.sleep(for: .milliseconds(2))
        }
        #expect(seen == Array(1...20))
    }

    @Test func whenTheHandlersActorDies_theRelationEnds_andNothingIsDelivered() async {
        let model = SharedModel()
        let listener = Listener()
        let lifetime = LifetimeCounter()
        var registrar: Registrar? = Registrar(lifetime: lifetime)
        await registrar!.observe(model, by: listener)
        #expect(SafeObservation.relations(of: model).count == 1)
        registrar = nil
        #expect(lifetime.liveCount == 0, "the relation kept its actor alive")
        await Task.detached { model.count = 1 }.value
        #expect(await eventually { SafeObservation.relations(of: model).isEmpty })
        #expect(listener.received.withLock { $0 }.isEmpty)
    }

    @Test func nonisolatedRegistration_keepsSynchronousAnyThreadDelivery() async {
        let model = SharedModel()
        let result = await Task.detached { () -> Bool in
            let listener = Listener()
            let ranOnThisThread = Flag()
            let thread = pthread_self()
            model.safeObserve(\.count, by: listener) { _, _, _ in
                if pthread_self() == thread { ranOnThisThread.set() }
            }
            model.count = 1
            return ranOnThisThread.isSet
        }.value
        #expect(result)
    }
}

/// A main-actor observer with a controller.
@MainActor
private final class Badge {
    lazy var controller = ObservationController(observer: self)
    var values: [Int] = []
    var titles = 0
    var keyPathChanges = 0

    func titleChanged() {
        MainActor.preconditionIsolated()
        titles += 1
    }
}

/// An actor listener observing with `self` as the listener.
private actor Accumulator {
    var seen: [Int] = []
    let lifetime: LifetimeCounter?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }

    deinit { lifetime?.didDeinit() }

    func observe(_ model: SharedModel) {
        model.safeObserve(\.count, by: self) { accumulator, _, change in
            accumulator.record(change.newValue!)
        }
    }

    private func record(_ value: Int) {
        seen.append(value)
    }

    func append(_ value: Int) { seen.append(value) }

    /// Both answers to "is this thread on `executor`", from this actor.
    func sees(_ executor: UnownedSerialExecutor) -> (Bool, Bool) {
        (_isCurrentExecutorByIdentity(executor), _isCurrentExecutor(executor, isMainActor: false))
    }
}

/// An actor running on a custom executor, observing from inside itself.
private actor QueueActor {
    private let executor = QueueExecutor()
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    var seen: [Int] = []

    func observe(_ model: SharedModel) {
        model.safeObserve(\.count, by: self) { actor, _, change in actor.seen.append(change.newValue!) }
    }

    func changeHere(_ model: SharedModel, to value: Int) -> [Int] {
        model.count = value
        return seen
    }
}

/// A global actor other than the main actor (its hops take the general path).
@globalActor
private actor BackgroundActor {
    static let shared = BackgroundActor()
}

/// A listener isolated to `BackgroundActor`.
@BackgroundActor
private final class BackgroundListener {
    var seen: [Int] = []

    static func make(observing model: SharedModel) -> BackgroundListener {
        let listener = BackgroundListener()
        model.safeObserve(\.count, by: listener) { listener, _, change in
            BackgroundActor.preconditionIsolated()
            listener.seen.append(change.newValue!)
        }
        return listener
    }
}

/// An actor that registers a handler for another listener: the handler is
/// isolated to it.
private actor Registrar {
    let lifetime: LifetimeCounter

    init(lifetime: LifetimeCounter) {
        self.lifetime = lifetime
        lifetime.didInit()
    }

    deinit { lifetime.didDeinit() }

    func observe(_ model: SharedModel, by listener: Listener) {
        model.safeObserve(\.count, by: listener) { listener, _, change in
            listener.record("\(change.newValue!)")
        }
    }
}

extension Actor {
    /// `body`'s result, computed on the actor.
    fileprivate func running<Result: Sendable>(_ body: @Sendable () -> Result) -> Result { body() }
}
