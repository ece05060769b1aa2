import Dispatch
import Testing

@testable import SafeObserve

/// KVOController's own test suite (FBKVOControllerTests), ported, plus the
/// behaviours it never tested.
@Suite("ObservationController")
struct ObservationControllerTests {
    // MARK: Options match plain safeObserve (KVOController: options none / basic / all)

    @Test(
        arguments: [
            (ObservationOptions(), ["nil->nil", "nil->nil"]),
            ([.new, .old, .initial], ["nil->0 initial", "0->1", "1->2"]),
            ([.new, .old, .initial, .prior], ["nil->0 initial", "0->nil prior", "0->1", "1->nil prior", "1->2"]),
        ] as [(ObservationOptions, [String])])
    func options_deliverExactlyWhatPlainSafeObserveDelivers(options: ObservationOptions, expected: [String]) {
        let counter = Counter()
        let observer = ControllerObserver()
        let plain = Listener()
        let viaController = EventLog()
        let viaSafeObserve = EventLog()
        observer.observationController.observe(counter, keyPath: \.count, options: options) { _, _, change in
            viaController.record(describe(change))
        }
        counter.safeObserve(\.count, by: plain, options: options) { _, _, change in
            viaSafeObserve.record(describe(change))
        }
        counter.count = 1
        counter.count = 2
        #expect(viaController.entries == expected)
        #expect(viaSafeObserve.entries == expected)
    }

    @Test func closure_receivesTheObserverAndTheObject() {
        let counter = Counter()
        counter.title = "inbox"
        let observer = ControllerObserver()
        observer.observationController.observe(counter, keyPath: \.count) { observer, counter, change in
            observer.log.record("\(counter.title) \(describe(change))")
        }
        counter.count = 1
        #expect(observer.log.entries == ["inbox nil->1"])
    }

    // MARK: Several key paths in one call

    @Test func severalKeyPaths_areEachDelivered_inTheOrderTheyChanged_namingTheirKeyPath() {
        let counter = Counter()
        let observer = ControllerObserver()
        let log = EventLog()
        observer.observationController.observe(counter, keyPaths: \.count, \.title, options: [.initial, .new, .old]) {
            _, _, change in
            log.record(describe(change))
        }
        counter.title = "a"
        counter.count = 1
        counter.title = "b"
        #expect(
            log.entries == [
                "count nil->0 initial", "title nil->untitled initial",
                "title untitled->a", "count 0->1", "title a->b",
            ])
        #expect(observer.observationController.relations.count == 2)
    }

    @Test func severalKeyPaths_keyPathComparesEqualToALiteral() {
        let counter = Counter()
        let observer = ControllerObserver()
        let log = EventLog()
        observer.observationController.observe(counter, keyPaths: \.count, \.title) { _, _, change in
            if change.keyPath == \Counter.count { log.record("count \(change.newValue as? Int ?? -1)") }
            if change.keyPath == \Counter.title { log.record("title \(change.newValue as? String ?? "?")") }
        }
        counter.count = 4
        counter.title = "t"
        #expect(log.entries == ["count 4", "title t"])
    }

    // MARK: Actions (KVOController: action with 0, 1, 2 arguments)

    @Test func action_withNoArgument_callsTheObserversMethod() {
        let counter = Counter()
        let observer = ControllerObserver()
        observer.observationController.observe(counter, keyPath: \.count, action: ControllerObserver.refresh)
        counter.count = 1
        counter.count = 2
        #expect(observer.log.entries == ["refresh", "refresh"])
    }

    @Test func action_withTheChange_callsTheObserversMethod() {
        let counter = Counter()
        let observer = ControllerObserver()
        observer.observationController.observe(
            counter, keyPath: \.count, options: [.old, .new], action: ControllerObserver.countChanged(_:))
        counter.count = 1
        #expect(observer.log.entries == ["change 0->1"])
    }

    @Test func action_withTheChangeAndTheObject_callsTheObserversMethod() {
        let counter = Counter()
        counter.title = "inbox"
        let observer = ControllerObserver()
        observer.observationController.observe(
            counter, keyPath: \.count, options: [.initial, .new], action: ControllerObserver.countChanged(_:of:))
        counter.count = 1
        #expect(observer.log.entries == ["change nil->0 initial of inbox", "change nil->1 of inbox"])
    }

    @Test func actions_onSeveralKeyPaths_callTheObserversMethodsInEachArity() {
        let counter = Counter()
        counter.title = "inbox"
        let observer = ControllerObserver()
        let controller = observer.observationController
        controller.observe(counter, keyPaths: \.count, action: ControllerObserver.refresh)
        controller.observe(
            counter, keyPaths: \.title, options: [.old, .new], action: ControllerObserver.counterChanged(_:))
        counter.count = 1
        counter.title = "mail"
        let other = Counter()
        controller.observe(other, keyPaths: \.count, \.title, action: ControllerObserver.counterChanged(_:of:))
        other.count = 2
        #expect(
            observer.log.entries == [
                "refresh", "erased title inbox->mail", "erased count nil->2 of untitled",
            ])
    }

    @Test func action_doesNotRetainTheObserver() {
        let observers = LifetimeCounter()
        let counter = Counter()
        let other = Counter()
        let controller: ObservationController<ControllerObserver>
        weak var weakObserver: ControllerObserver?
        do {
            let observer = ControllerObserver(lifetime: observers)
            weakObserver = observer
            controller = ObservationController(observer: observer)
            controller.observe(counter, keyPath: \.count, action: ControllerObserver.refresh)
            controller.observe(other, keyPath: \.count, action: ControllerObserver.countChanged(_:of:))
        }
        #expect(weakObserver == nil, "Observer leaked through an action")
        #expect(observers.liveCount == 0)
        counter.count = 1  // the observer is gone: dropped, no crash
        other.count = 1
        #expect(controller.observer == nil)
    }

    // MARK: Delegate fallback (KVOController: context / observeValueForKeyPath)

    @Test func noHandlerAndNoAction_deliversToTheDelegateMethod() {
        let counter = Counter()
        let observer = ControllerObserver()
        observer.observationController.observe(counter, keyPath: \.count, options: [.initial, .new])
        observer.observationController.observe(counter, keyPaths: \.title)
        counter.count = 1
        counter.title = "x"
        #expect(
            observer.log.entries == [
                "delegate count nil->0 initial", "delegate count nil->1",
                "delegate title nil->x",
            ])
    }

    @Test func keyPathThatIsNotObserved_isReported_andRetainsNothing() {
        let observed = LifetimeCounter()
        let observer = ControllerObserver()
        let messages = EventLog()
        weak var weakCounter: Counter?
        do {
            let counter = Counter(lifetime: observed)
            weakCounter = counter
            _Diagnostics.withHandler {
                messages.record($0)
            } body: {
                observer.observationController.observe(counter, keyPath: \.lifetime) { _, _, _ in }
            }
        }
        #expect(messages.entries.count == 1)
        #expect(observer.observationController.relations.isEmpty)
        #expect(observer.observationController._trackedObjectCount == 0)
        #expect(weakCounter == nil, "A rejected registration kept the object alive")
    }

    // MARK: Unobserving

    @Test func unobserveInsideTheInitialDelivery_stopsEveryLaterDelivery() {
        let counter = Counter()
        let observer = ControllerObserver()
        observer.observationController.observe(counter, keyPath: \.count, options: [.initial, .new]) {
            observer, counter, change in
            observer.log.record(describe(change))
            if change.isInitial { observer.observationController.unobserve(counter, keyPath: \.count) }
        }
        counter.count = 1
        #expect(observer.log.entries == ["nil->0 initial"])
        #expect(observer.observationController.relations.isEmpty)
        #expect(observer.observationController._trackedObjectCount == 0)
    }

    @Test func unobserveObjectInsideTheFirstInitialDelivery_ofSeveralKeyPaths_cancelsTheRest() {
        let counter = Counter()
        let observer = ControllerObserver()
        observer.observationController.observe(counter, keyPaths: \.count, \.title, options: [.initial, .new]) {
            observer, counter, change in
            observer.log.record(describe(change))
            if change.isInitial { observer.observationController.unobserve(counter) }
        }
        counter.count = 1
        counter.title = "x"
        #expect(observer.log.entries == ["count nil->0 initial"])
        #expect(observer.observationController.relations.isEmpty)
        #expect(observer.observationController._trackedObjectCount == 0)
    }

    @Test func unobserveKeyPath_stopsOnlyThatKeyPath() {
        let counter = Counter()
        let observer = ControllerObserver()
        let controller = observer.observationController
        controller.observe(counter, keyPaths: \.count, \.title) { observer, _, change in
            observer.log.record(describe(change))
        }
        controller.unobserve(counter, keyPath: \.count)
        controller.unobserve(counter, keyPath: \.count)  // idempotent
        counter.count = 1
        counter.title = "x"
        #expect(observer.log.entries == ["title nil->x"])
        #expect(controller._retainedObjectCount == 1, "Still observed: still retained")
    }

    @Test func unobserveObject_stopsThatObjectOnly_andReleasesIt() {
        let observed = LifetimeCounter()
        let observer = ControllerObserver()
        let controller = observer.observationController
        let kept = Counter()
        kept.title = "kept"
        weak var weakDropped: Counter?
        do {
            let dropped = Counter(lifetime: observed)
            dropped.title = "dropped"
            weakDropped = dropped
            for counter in [kept, dropped] {
                controller.observe(counter, keyPaths: \.count, \.title) { observer, counter, change in
                    observer.log.record("\(counter.title) \(describe(change))")
                }
            }
            controller.unobserve(dropped)
            controller.unobserve(dropped)  // idempotent
            dropped.count = 1
            kept.count = 2
        }
        #expect(observer.log.entries == ["kept count nil->2"])
        #expect(weakDropped == nil, "Unobserved object still retained")
        #expect(controller._trackedObjectCount == 1)
    }

    @Test func unobserveAll_stopsEverything_andReleasesEveryObservedObject() {
        let observed = LifetimeCounter()
        let observer = ControllerObserver()
        let controller = observer.observationController
        let log = EventLog()
        weak var weakFirst: Counter?
        weak var weakSecond: Counter?
        do {
            let first = Counter(lifetime: observed)
            let second = Counter(lifetime: observed)
            weakFirst = first
            weakSecond = second
            controller.observe(first, keyPath: \.count) { _, _, _ in log.record("first") }
            controller.observe(second, keyPaths: \.count, \.title) { _, _, _ in log.record("second") }
            #expect(controller._retainedObjectCount == 2)
            controller.unobserveAll()
            controller.unobserveAll()  // idempotent
            first.count = 1
            second.count = 1
        }
        #expect(log.entries.isEmpty)
        #expect(controller.relations.isEmpty)
        #expect(controller._trackedObjectCount == 0)
        #expect(weakFirst == nil && weakSecond == nil, "Observed objects leaked after unobserveAll")
        #expect(observed.liveCount == 0)
    }

    @Test func unobserve_ofSomethingNeverObserved_isANoOp() {
        let controller = ObservationController(observer: ControllerObserver())
        let counter = Counter()
        controller.unobserve(counter, keyPath: \.count)
        controller.unobserve(counter)
        controller.unobserveAll()
        #expect(controller._trackedObjectCount == 0)
    }

    // MARK: Dedupe

    @Test func observingTheSameKeyPathTwice_isOneRelation_andKeepsTheFirstHandlerAndOptions() {
        let counter = Counter()
        let observer = ControllerObserver()
        let controller = observer.observationController
        let captures = LifetimeCounter()
        let log = EventLog()
        controller.observe(counter, keyPath: \.count, options: .new) { _, _, change in
            log.record("first \(describe(change))")
        }
        do {
            let captured = Captured(captures)
            controller.observe(counter, keyPath: \.count, options: [.initial, .old, .new]) { _, _, change in
                _ = captured
                log.record("second \(describe(change))")
            }
            controller.observe(counter, keyPaths: \.count, \.title) { _, _, _ in
                _ = captured
                log.record("third")
            }
        }
        counter.count = 1
        #expect(log.entries == ["first nil->1"], "The second handler (and its .initial) must be discarded")
        #expect(controller.relations.count == 2)
        #expect(controller.relations.first { $0.keyPath == \Counter.count }?.options == .new)
        counter.title = "x"
        #expect(log.entries == ["first nil->1", "third"])
    }

    @Test func observingAgainAfterUnobserve_installsTheNewHandler() {
        let counter = Counter()
        let observer = ControllerObserver()
        let controller = observer.observationController
        let log = EventLog()
        controller.observe(counter, keyPath: \.count) { _, _, _ in log.record("first") }
        controller.unobserve(counter, keyPath: \.count)
        controller.observe(counter, keyPath: \.count) { _, _, _ in log.record("second") }
        counter.count = 1
        #expect(log.entries == ["second"])
    }

    @Test func twoControllersOfOneObserver_areIndependentRelations() {
        let counter = Counter()
        let observer = ControllerObserver()
        let first = ObservationController(observer: observer)
        let second = ObservationController(observer: observer)
        let log = EventLog()
        first.observe(counter, keyPath: \.count) { _, _, _ in log.record("first") }
        second.observe(counter, keyPath: \.count) { _, _, _ in log.record("second") }
        counter.count = 1
        #expect(log.entries == ["first", "second"])
    }

    // MARK: Lifetimes

    @Test func releasedController_endsEveryRelationSynchronously_andReleasesHandlersAndObjects() {
        let captures = LifetimeCounter()
        let observed = LifetimeCounter()
        let observer = ControllerObserver()
        let counter = Counter()
        let log = EventLog()
        weak var weakController: ObservationController<ControllerObserver>?
        weak var weakRetained: Counter?
        do {
            let controller = ObservationController(observer: observer)
            weakController = controller
            let retained = Counter(lifetime: observed)
            weakRetained = retained
            let captured = Captured(captures)
            controller.observe(counter, keyPaths: \.count, \.title) { _, _, _ in
                _ = captured
                log.record("delivered")
            }
            controller.observe(retained, keyPath: \.count) { _, _, _ in _ = captured }
            #expect(SafeObservation.relations(of: counter).count == 2)
        }
        #expect(weakController == nil, "Controller leaked")
        // Synchronous: no change was needed to clean up.
        #expect(SafeObservation.relations(of: counter).isEmpty)
        #expect(captures.liveCount == 0, "Handler captures leaked after the controller died")
        #expect(weakRetained == nil, "Retained observed object leaked after the controller died")
        counter.count = 1
        #expect(log.entries.isEmpty, "A released controller delivered a change")
    }

    @Test func deallocatedObserver_dropsDeliveries_withoutCrashing() {
        let observers = LifetimeCounter()
        let counter = Counter()
        let log = EventLog()
        let controller: ObservationController<ControllerObserver>
        do {
            let observer = ControllerObserver(lifetime: observers)
            controller = ObservationController(observer: observer)
            controller.observe(counter, keyPath: \.count) { observer, _, _ in
                log.record("delivered")
                _ = observer
            }
            controller.observe(counter, keyPath: \.title)  // delegate form
            counter.count = 1
        }
        #expect(observers.liveCount == 0, "Observer leaked")
        counter.count = 2
        counter.title = "x"
        #expect(log.entries == ["delivered"])
        #expect(controller.observer == nil)
        // Observing for a dead observer does nothing.
        controller.observe(Counter(), keyPath: \.count) { _, _, _ in log.record("never") }
        #expect(controller._trackedObjectCount == 1, "Only `counter`, still observed, is tracked")
    }

    @Test func retainsObserved_keepsTheObjectAliveUntilUnobserved() {
        let observer = ControllerObserver()
        let controller = ObservationController(observer: observer)
        weak var weakCounter: Counter?
        do {
            let counter = Counter()
            weakCounter = counter
            controller.observe(counter, keyPath: \.count) { _, _, _ in }
        }
        #expect(weakCounter != nil, "retainsObserved: true must keep the object alive")
        if let counter = weakCounter { controller.unobserve(counter) }
        #expect(weakCounter == nil, "Unobserved object still retained")
    }

    @Test func withoutRetainingObserved_theObservedObjectMayDieFirst_andEverythingIsTornDown() {
        let captures = LifetimeCounter()
        let observed = LifetimeCounter()
        let observer = ControllerObserver()
        let controller = ObservationController(observer: observer, retainsObserved: false)
        weak var weakCounter: Counter?
        do {
            let counter = Counter(lifetime: observed)
            weakCounter = counter
            let captured = Captured(captures)
            controller.observe(counter, keyPaths: \.count, \.title) { _, _, _ in _ = captured }
            controller.observe(counter, keyPath: \.count, action: ControllerObserver.refresh)  // deduped
            #expect(controller.relations.count == 2)
            #expect(controller._trackedObjectCount == 0, "Nothing retained, nothing tracked")
        }
        #expect(weakCounter == nil, "retainsObserved: false kept the object alive")
        #expect(observed.liveCount == 0)
        #expect(controller.relations.isEmpty, "Relations outlived the observed object")
        #expect(captures.liveCount == 0, "Handler captures outlived the observed object")
        #expect(controller._trackedObjectCount == 0)
        controller.unobserveAll()  // harmless afterwards
    }

    @Test func observerObservingItself_throughItsOwnController_doesNotLeak() {
        let observers = LifetimeCounter()
        weak var weakOwner: SelfObservingOwner?
        do {
            let owner = SelfObservingOwner(lifetime: observers)
            weakOwner = owner
            owner.observationController.observe(owner, keyPath: \.count, action: SelfObservingOwner.countDidChange)
            owner.count = 1
            #expect(owner.changes == 1)
            #expect(owner.observationController._retainedObjectCount == 0, "The observer itself is never retained")
        }
        #expect(weakOwner == nil, "Self-observing owner leaked")
        #expect(observers.liveCount == 0)
    }

    @Test func observationController_isCreatedOnce_andIsTheSameFromEveryThread() {
        let owner = FinalControllerObserver()
        let box = UncheckedSendable(owner)
        let seen = _Mutex<Set<ObjectIdentifier>>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let id = ObjectIdentifier(box.value.observationController)
            seen.withLock { _ = $0.insert(id) }
        }
        #expect(seen.withLock { $0.count } == 1)
        #expect(ObjectIdentifier(owner.observationController) == seen.withLock { $0.first })
    }

    @Test func observationController_insideTheOwnersDeinit_createsNothing_andUnobservingThereIsHarmless() {
        let counter = Counter()
        let owners = LifetimeCounter()
        do {
            let neverUsed = ControllerObserver(lifetime: owners)
            neverUsed.onDeinit = { owner in
                owner.observationController.unobserveAll()
                owner.observationController.observe(counter, keyPath: \.count) { _, _, _ in }
            }
            let used = ControllerObserver(lifetime: owners)
            used.observationController.observe(counter, keyPath: \.title) { _, _, _ in }
            used.onDeinit = { owner in
                owner.observationController.unobserve(counter, keyPath: \.title)
            }
        }
        #expect(owners.liveCount == 0)
        #expect(SafeObservation.relations(of: counter).isEmpty)
    }

    // MARK: Re-entrancy

    @Test func releasingTheObserverAndItsControllerInsideACallback_isSafe() {
        let counter = Counter()
        let observers = LifetimeCounter()
        let holder = _Mutex<ControllerObserver?>(ControllerObserver(lifetime: observers))
        let log = EventLog()
        holder.withLock { $0! }.observationController.observe(counter, keyPaths: \.count, \.title) { _, _, change in
            log.record(describe(change))
            let released = holder.withLock { holder in
                defer { holder = nil }
                return holder
            }
            _ = released  // the observer and its controller die here, inside their own callback
        }
        let plain = Listener()
        counter.safeObserve(\.count, by: plain) { _, _, _ in log.record("plain") }
        counter.count = 1
        counter.count = 2
        #expect(observers.liveCount == 0)
        #expect(log.entries == ["count nil->1", "plain", "plain"])
        #expect(SafeObservation.relations(of: counter).count == 1)
    }

    @Test func observingAndMutatingInsideACallback_followsSafeObserveRules() {
        let counter = Counter()
        let observer = ControllerObserver()
        observer.observationController.observe(counter, keyPath: \.count) { observer, counter, change in
            observer.log.record("count \(describe(change))")
            guard change.newValue == 1 else { return }
            observer.observationController.observe(counter, keyPath: \.title, options: [.initial, .new]) {
                observer, _, change in
                observer.log.record("title \(describe(change))")
            }
            counter.title = "nested"
        }
        counter.count = 1
        counter.count = 2
        #expect(
            observer.log.entries == [
                "count nil->1", "title nil->untitled initial", "title nil->nested", "count nil->2",
            ])
    }

    // MARK: Debugging

    @Test func debugDescription_listsTheObserver_andEachObjectWithItsKeyPathsAndOptions() {
        let observer = ControllerObserver()
        let controller = ObservationController(observer: observer, retainsObserved: false)
        let counter = Counter()
        let other = Counter()
        controller.observe(counter, keyPath: \.count, options: [.initial, .new]) { _, _, _ in }
        controller.observe(counter, keyPath: \.title, options: .old) { _, _, _ in }
        controller.observe(other, keyPath: \.title) { _, _, _ in }
        // Objects, and key paths within an object, are listed in no particular order.
        let lines = controller.debugDescription.split(separator: "\n").map(String.init)
        #expect(lines.count == 4)
        #expect(
            lines.first
                == "ObservationController<ControllerObserver>(observer: ControllerObserver, retainsObserved: false) {")
        #expect(lines.last == "}")
        func entries(of object: Counter) -> Set<String> {
            let prefix = "  Counter \(ObjectIdentifier(object)): "
            guard let line = lines.first(where: { $0.hasPrefix(prefix) }) else { return [] }
            return Set(line.dropFirst(prefix.count).split(separator: "; ").map(String.init))
        }
        // Key paths are named as in source, not `\Counter.<computed 0x…>`.
        #expect(entries(of: counter) == ["\\Counter.count [.new, .initial]", "\\Counter.title [.old]"])
        #expect(entries(of: other) == ["\\Counter.title [.new]"])
        controller.unobserveAll()
        #expect(controller.debugDescription.hasSuffix("retainsObserved: false) {}"))
    }
}

/// An owner that observes its own property through its own controller.
final class SelfObservingOwner: SafeObservable, ObservationControllerOwner {
    let observationControllerStorage = ObservationControllerStorage()
    @Observed var count = 0
    var changes = 0
    let lifetime: LifetimeCounter

    init(lifetime: LifetimeCounter) {
        self.lifetime = lifetime
        lifetime.didInit()
    }

    deinit { lifetime.didDeinit() }

    func countDidChange() { changes += 1 }
}

/// An owner class with a subclass: its controller is reached through either
/// static type (inside the class, `self` has the dynamic `Self` type; code
/// holding a `HierarchyOwnerBase` reference sees that type).
class HierarchyOwnerBase: ObservationControllerOwner {
    let observationControllerStorage = ObservationControllerStorage()
    var seen: [String] = []
    let lifetime: LifetimeCounter?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }

    deinit { lifetime?.didDeinit() }
}

final class HierarchyOwner: HierarchyOwnerBase {}

/// Code that knows the owner as its superclass.
private func watchAsBase(_ owner: HierarchyOwnerBase, _ counter: Counter) {
    owner.observationController.observe(counter, keyPath: \.count) { owner, _, change in
        owner.seen.append("base \(change.newValue!)")
    }
}

/// Code that knows the owner as its subclass.
private func watchAsSubclass(_ owner: HierarchyOwner, _ counter: Counter) {
    owner.observationController.observe(counter, keyPath: \.count) { owner, _, change in
        owner.seen.append("subclass \(change.newValue!)")
    }
}

@Suite("ObservationControllerOwner in a class hierarchy")
struct ObservationControllerOwnerHierarchyTests {
    @Test func superclassAndSubclassTypedCode_shareOneControllersRelations() {
        let owner = HierarchyOwner()
        let counter = Counter()
        watchAsBase(owner, counter)
        watchAsSubclass(owner, counter)  // the same key path: a dedupe hit
        #expect(SafeObservation.relations(of: counter).count == 1)
        counter.count = 1
        #expect(owner.seen == ["base 1"], "one relation, the first handler")
        (owner as HierarchyOwnerBase).observationController.unobserveAll()
        #expect(SafeObservation.relations(of: counter).isEmpty, "unobserveAll through the superclass missed some")
        watchAsSubclass(owner, counter)
        (owner as HierarchyOwnerBase).observationController.unobserve(counter)
        #expect(SafeObservation.relations(of: counter).isEmpty)
    }

    @Test func unobserveAllThroughTheSuperclass_releasesWhatTheSubclassObserved() {
        let owner = HierarchyOwner()
        let counterLifetime = LifetimeCounter()
        weak var weakCounter: Counter?
        do {
            let counter = Counter(lifetime: counterLifetime)
            weakCounter = counter
            watchAsSubclass(owner, counter)
        }
        #expect(weakCounter != nil, "the controller retains what it observes")
        (owner as HierarchyOwnerBase).observationController.unobserveAll()
        #expect(weakCounter == nil, "unobserveAll through the superclass released the subclass's object")
        #expect(counterLifetime.deinitCount == 1)
    }

    @Test func theOwnersDeath_endsTheRelationsMadeThroughEitherType() {
        let ownerLifetime = LifetimeCounter()
        let counter = Counter()
        let other = Counter()
        weak var weakOwner: HierarchyOwner?
        do {
            let owner = HierarchyOwner(lifetime: ownerLifetime)
            weakOwner = owner
            watchAsBase(owner, counter)
            watchAsSubclass(owner, other)
            #expect(owner.observationController.observer === owner)
            #expect((owner as HierarchyOwnerBase).observationController.observer === owner)
        }
        #expect(weakOwner == nil)
        #expect(ownerLifetime.deinitCount == 1)
        #expect(SafeObservation.relations(of: counter).isEmpty)
        #expect(SafeObservation.relations(of: other).isEmpty)
    }
}
