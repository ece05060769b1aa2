// The machinery behind `ObservationController`'s public API (in
// ObservationController.swift, +KeyPaths, and the delegate overloads in
// ObservationControllerDelegate.swift): registration bracketing, settling,
// the deliveries' wrappers, and the core the typed controllers share.

import Synchronization

extension ObservationController {
    /// Brackets registrations on `object`: retains it (if asked) before, and
    /// releases it after if no relation on it remains.
    ///
    /// `body` receives a function telling whether `object` was unobserved
    /// since the call began.
    func withRegistration<Object: AnyObject>(
        of object: Object, _ body: (_ isCancelled: () -> Bool) -> Void
    ) {
        // Read outside the lock: the temporary reference may be the observer's last.
        guard let observer = relay.observer else { return }
        let retains = retainsObserved && object !== observer
        let id = ObjectIdentifier(object)
        let epoch = state.withLock { state in
            state.objects[id, default: _ControllerBook.Entry()].inFlight += 1
            if retains { state.objects[id]!.object = object }
            return state.objects[id]!.epoch
        }
        body { self.state.withLock { $0.objects[id]?.epoch != epoch } }
        state.withLock { state in
            state.objects[id]!.inFlight -= 1
            state.objects[id]!.generation += 1
        }
        settle([id], cancelling: false)
    }

    /// Drops the table entries of `ids` (or of every object, for `nil`) that
    /// have no registration in flight and retain nothing still observed,
    /// releasing their objects after unlocking.
    ///
    /// Three steps, so that no lock is taken inside another: under the
    /// controller's lock, the candidates and their generations; unlocked,
    /// whether the relay still has a relation on each retained one (its
    /// proxy's lock); under the controller's lock again, the candidates
    /// whose entry did not change meanwhile are dropped (a registration
    /// that returned in between settles the object itself).
    ///
    /// - Complexity: O(*k*) per object, *k* being its relations here.
    func settle(_ ids: [ObjectIdentifier]?, cancelling: Bool) {
        _ControllerBook.settle(state, relay: relay, ids, cancelling: cancelling)
    }

    func register<Object: SafeObservable, Value>(
        _ object: Object, _ keyPath: KeyPath<Object, Value>, _ options: ObservationOptions,
        _ isolation: isolated (any Actor)?, _ body: @escaping (Observer, Object, ObservedChange<Value>) -> Void
    ) {
        object.safeObserve(
            keyPath, by: relay, options: options, isolation: isolation, changeHandler: Self.delivering(to: body))
    }

    /// Registers `handler` on each of `keyPaths`, in order; stops if `object`
    /// is unobserved meanwhile (by an `.initial` delivery).
    func observeEach<Object: SafeObservable, each Value>(
        _ object: Object, _ keyPaths: repeat KeyPath<Object, each Value>, options: ObservationOptions,
        isolation: isolated (any Actor)?,
        _ handler: @escaping (Observer, Object, ObservedKeyPathChange<Object>) -> Void
    ) {
        withRegistration(of: object) { isCancelled in
            for keyPath in repeat each keyPaths {
                guard !isCancelled() else { break }
                registerErased(object, keyPath, options, isolation, handler)
            }
        }
    }

    func registerErased<Object: SafeObservable, Value>(
        _ object: Object, _ keyPath: KeyPath<Object, Value>, _ options: ObservationOptions,
        _ isolation: isolated (any Actor)?, _ body: @escaping (Observer, Object, ObservedKeyPathChange<Object>) -> Void
    ) {
        register(object, keyPath, options, isolation, Self.erasing(keyPath, body))
    }

    /// Drops deliveries once the controller began its `deinit` or the observer died.
    static func delivering<Root: AnyObject, Value>(
        to body: @escaping (Observer, Root, ObservedChange<Value>) -> Void
    ) -> (_ControllerRelay, Root, ObservedChange<Value>) -> Void {
        { relay, object, change in
            guard relay.isEnabled.load(ordering: .acquiring), let observer = relay.observer else { return }
            body(typed(observer), object, change)
        }
    }

    static func calling<Root: AnyObject, Value>(
        _ action: @escaping (Observer) -> () -> Void
    ) -> (Observer, Root, ObservedChange<Value>) -> Void {
        { observer, _, _ in action(observer)() }
    }

    static func calling<Root: AnyObject, Value>(
        _ action: @escaping (Observer) -> (ObservedChange<Value>) -> Void
    ) -> (Observer, Root, ObservedChange<Value>) -> Void {
        { observer, _, change in action(observer)(change) }
    }

    static func calling<Root: AnyObject, Value>(
        _ action: @escaping (Observer) -> (ObservedChange<Value>, Root) -> Void
    ) -> (Observer, Root, ObservedChange<Value>) -> Void {
        { observer, object, change in action(observer)(change, object) }
    }

    static func erasing<Root: AnyObject, Value>(
        _ keyPath: KeyPath<Root, Value>,
        _ body: @escaping (Observer, Root, ObservedKeyPathChange<Root>) -> Void
    ) -> (Observer, Root, ObservedChange<Value>) -> Void {
        return { observer, object, change in body(observer, object, ObservedKeyPathChange(keyPath, change)) }
    }

    static func callingErased<Root: AnyObject>(
        _ action: @escaping (Observer) -> () -> Void
    ) -> (Observer, Root, ObservedKeyPathChange<Root>) -> Void {
        { observer, _, _ in action(observer)() }
    }

    static func callingErased<Root: AnyObject>(
        _ action: @escaping (Observer) -> (ObservedKeyPathChange<Root>) -> Void
    ) -> (Observer, Root, ObservedKeyPathChange<Root>) -> Void {
        { observer, _, change in action(observer)(change) }
    }

    static func callingErased<Root: AnyObject>(
        _ action: @escaping (Observer) -> (ObservedKeyPathChange<Root>, Root) -> Void
    ) -> (Observer, Root, ObservedKeyPathChange<Root>) -> Void {
        { observer, object, change in action(observer)(change, object) }
    }

}

/// The listener every relation of a controller belongs to: the
/// observer-owned face of SafeObserve's listener proxy. Its
/// `ObserverLifetime` ends the relations when the controller's core goes.
final class _ControllerRelay: SafeObserver {
    let observerLifetime = ObserverLifetime()
    weak let observer: AnyObject?
    /// Cleared when the core begins its `deinit`.
    let isEnabled = Atomic<Bool>(true)

    init(_ observer: AnyObject?) {
        self.observer = observer
    }
}

/// What the controllers of one observer share (one, unless the observer is
/// an ``ObservationControllerOwner`` seen through several static types).
final class _ControllerCore {
    let retainsObserved: Bool
    let relay: _ControllerRelay
    let book = _Mutex(_ControllerBook())

    init(observer: AnyObject?, retainsObserved: Bool) {
        self.retainsObserved = retainsObserved
        relay = _ControllerRelay(observer)
    }

    deinit {
        // Callbacks still running elsewhere see the flag; none starts after this.
        relay.isEnabled.store(false, ordering: .releasing)
        // Synchronous even if a delivery elsewhere holds the relay for a moment.
        SafeObservation.removeAll(observedBy: relay)
        // `book` (and the observed objects it retains) is released after this body.
    }
}

/// A controller's bookkeeping of the objects it observes: not generic, so
/// that nothing in it instantiates metadata at run time.
struct _ControllerBook {
    /// Per observed object: the retained object, the registrations in
    /// flight, a cancellation epoch and a generation. An entry exists only
    /// while an `observe` call on the object is in flight or the object is
    /// retained, so entries for dead objects never accumulate.
    struct Entry {
        /// The observed object, when the controller retains it (and it is
        /// not the observer).
        var object: AnyObject?
        /// `observe` calls on the object that have not returned yet.
        var inFlight = 0
        /// Bumped by `unobserve(_:)` and `unobserveAll()`, to cancel the
        /// rest of an `observe(_:keyPaths:…)` call in flight.
        var epoch = 0
        /// Bumped when an `observe` call on the object returns: a settle
        /// that looked for the object's relations before then looks again.
        var generation = 0
    }

    /// An entry that may be dropped, as it was when `settle` looked.
    struct SettleCandidate {
        let id: ObjectIdentifier
        let generation: Int
        /// Whether the entry retains its object (then it is dropped only if
        /// no relation on the object remains).
        let retains: Bool
    }

    var objects: [ObjectIdentifier: Entry] = [:]

    /// Bumps the epochs of `ids` (every object for `nil`) if `cancelling`;
    /// returns those with no registration in flight.
    mutating func settleCandidates(_ ids: [ObjectIdentifier]?, cancelling: Bool) -> [SettleCandidate] {
        var candidates: [SettleCandidate] = []
        for id in ids ?? Array(objects.keys) {
            guard let entry = objects[id] else { continue }
            if cancelling { objects[id]!.epoch += 1 }
            guard entry.inFlight == 0 else { continue }
            candidates.append(SettleCandidate(id: id, generation: entry.generation, retains: entry.object != nil))
        }
        return candidates
    }

    /// Drops the entries of `candidates` that did not change since; returns
    /// their objects, to release after unlocking.
    mutating func drop(_ candidates: [SettleCandidate]) -> [AnyObject] {
        var released: [AnyObject] = []
        for candidate in candidates {
            guard let entry = objects[candidate.id], entry.inFlight == 0, entry.generation == candidate.generation
            else { continue }
            objects[candidate.id] = nil
            if let object = entry.object { released.append(object) }
        }
        return released
    }

    /// Settles `ids` (every object for `nil`) of the book `book`, whose
    /// relations `relay` holds; see `ObservationController.settle`.
    static func settle(
        _ book: borrowing _Mutex<_ControllerBook>, relay: AnyObject, _ ids: [ObjectIdentifier]?, cancelling: Bool
    ) {
        let candidates = book.withLock { $0.settleCandidates(ids, cancelling: cancelling) }
        guard !candidates.isEmpty else { return }
        let proxy = _ListenerProxy.of(relay, create: false)
        let unobserved = candidates.filter { candidate in
            !candidate.retains || !(proxy?.hasRelation(on: candidate.id) ?? false)
        }
        guard !unobserved.isEmpty else { return }
        let released = book.withLock { $0.drop(unobserved) }
        // Released unlocked: an observed object's deinit is user code.
        _ = released
    }
}
