/// The deinit listener of one observed key path of one `@Observable` model.
///
/// A model written for Observation has no storage of SafeObserve's, so its
/// sentinel lives where Observation keeps what dies with the model: in the
/// closures of the trackings installed in the model's registrar. The
/// closure of each tracker's newest tracking holds the sentinel (through a
/// ``_SentinelHold``, which lets go when a newer tracking is installed or
/// the tracker stops), and nothing else does for long
/// (a registration while it registers; with the one-shot, before-the-store
/// tracking only, a tracker from a change to the delivery that re-tracks,
/// see ``_ObservableTracker``). When the model deinitializes, its registrar
/// releases those closures, and the sentinel's `deinit` tears down every
/// relation on the key path, as a `SafeObservable` property's sentinel
/// does: at once, whether or not a delivery is queued (with the one-shot
/// tracking, or after a burst cancelled the continuous one, a queued
/// delivery's tracker keeps the sentinel, and the watch below ends the
/// relations).
///
/// A key path that also reads other models (`\.account.balance`) installs
/// its tracking in their registrars too, which keep the closure until they
/// change or die. So the model is also watched (``_SenderWatch``): its
/// death tears the relations down within the watch's interval whatever
/// other registrars still hold.
@usableFromInline
// @unchecked Sendable: `trackers` and `watch` are reached only under
// `state`'s lock; everything else is immutable.
final class _ModelSentinel: @unchecked Sendable {
    /// Tears the relations down in its `deinit` (see ``_Sentinel``).
    let sentinel: _Sentinel
    let keyPath: AnyKeyPath
    let keyPathHash: Int
    let modelID: ObjectIdentifier
    /// The model's class (tests count sentinels by it).
    let modelType: ObjectIdentifier

    private struct State {
        /// The trackers of the key path, one per isolation and tracker type.
        var trackers: [TrackerKey: _AnyObservableTracker] = [:]
        /// Trackers whose actor died and whose key a new actor at its
        /// address took (portable probes only): they go on delivering to
        /// their relations until those end (see ``tracker(for:isolation:make:)``).
        var displaced: [_AnyObservableTracker] = []
        /// The model's death watch, once started.
        var watch: Int?
        var isDead = false
    }

    /// A tracker's isolation (`nil`: nonisolated) and type: key paths of one
    /// property spelled on different root types share the sentinel, not a
    /// tracker.
    struct TrackerKey: Hashable {
        let isolation: ObjectIdentifier?
        let type: ObjectIdentifier
    }

    private let state = _Mutex(State())

    var channel: _Channel { sentinel.channel }

    /// Made unlocked: hashing a key path may run user code.
    fileprivate init(model: AnyObject, keyPath: AnyKeyPath, keyPathHash: Int) {
        sentinel = _Sentinel(object: model, keyPath: keyPath)
        self.keyPath = keyPath
        self.keyPathHash = keyPathHash
        modelID = ObjectIdentifier(model)
        modelType = ObjectIdentifier(type(of: model))
    }

    deinit {
        _ModelSentinels.remove(self)
        let watch = state.withLock { $0.watch }
        if let watch { _SenderWatch.unwatch(modelID, id: watch) }
        // `sentinel` goes next, and its deinit ends every relation.
    }

    /// Starts watching the model (which the caller holds) for its death;
    /// called once, by the registration that filed this sentinel.
    fileprivate func startWatching(_ model: AnyObject) {
        let id = _SenderWatch.watch(model) { [weak self] in self?.modelDied() }
        state.withLock { $0.watch = id }
    }

    /// The model died while other registrars still held this sentinel: ends
    /// every relation and stops the trackers.
    func modelDied() {
        let trackers = state.withLock { state -> [_AnyObservableTracker] in
            state.isDead = true
            defer {
                state.trackers = [:]
                state.displaced = []
            }
            return Array(state.trackers.values) + state.displaced
        }
        channel.tearDown()
        for tracker in trackers { tracker.stop() }
    }

    /// The tracker for `isolation` (filed under `key`), made by `make` if
    /// there is none (unlocked: it may run user code); `nil` once the model
    /// died.
    func tracker(
        for key: TrackerKey, isolation: (any Actor)?, make: () -> _AnyObservableTracker
    ) -> (tracker: _AnyObservableTracker, isNew: Bool)? {
        // A stopped tracker (its relations had all ended) is replaced, and
        // so is one whose actor died where `isolation` now lives.
        if let found = state.withLock({ $0.trackers[key] }), !found.isStopped, found.serves(isolation) {
            return (found, false)
        }
        let made = make()
        let outcome = state.withLock { state -> (_AnyObservableTracker, Bool, _AnyObservableTracker?)? in
            guard !state.isDead else { return nil }
            if let found = state.trackers[key], !found.isStopped, found.serves(isolation) { return (found, false, nil) }
            let replaced = state.trackers.updateValue(made, forKey: key)
            // One that had not stopped serves an actor that died, where
            // `isolation` now lives: it goes on for its relations (on a
            // custom executor; a default actor's job ends them).
            if let replaced, !replaced.isStopped {
                state.displaced.append(replaced)
                return (made, true, nil)
            }
            return (made, true, replaced)
        }
        guard let (tracker, isNew, replaced) = outcome else { return nil }
        _ = replaced  // released unlocked
        return (tracker, isNew)
    }

    /// Forgets `tracker`, which stopped (no relation left on its isolation).
    func forget(_ tracker: _AnyObservableTracker, key: TrackerKey) {
        let removed = state.withLock { state -> _AnyObservableTracker? in
            guard state.trackers[key] === tracker else {
                guard let index = state.displaced.firstIndex(where: { $0 === tracker }) else { return nil }
                return state.displaced.remove(at: index)
            }
            return state.trackers.removeValue(forKey: key)
        }
        _ = removed  // released unlocked
    }

    /// The trackers' count (tests).
    var _trackerCount: Int { state.withLock { $0.trackers.count + $0.displaced.count } }
}

/// The live ``_ModelSentinel``s, by model: how a registration finds the
/// sentinel (and so the channel) of a key path already observed on a model.
enum _ModelSentinels {
    private struct Slot {
        weak var sentinel: _ModelSentinel?
        let keyPathHash: Int
    }

    private static let table = _Mutex<[ObjectIdentifier: [Slot]]>([:])

    /// The sentinels filed for the model `modelID` under a key path hashing
    /// to `keyPathHash` (retained: released by the caller, unlocked).
    private static func sentinels(of modelID: ObjectIdentifier, keyPathHash: Int) -> [_ModelSentinel] {
        table.withLock { table in
            (table[modelID] ?? []).compactMap { $0.keyPathHash == keyPathHash ? $0.sentinel : nil }
        }
    }

    /// The live sentinel of `keyPath` (by `==`) on `model`, if one was
    /// made: what an unobserve given an equal key path that is another
    /// instance (a literal in another file or module, a key path built at
    /// run time) resolves to. Never creates one.
    ///
    /// - Complexity: O(*k*) expected, *k* being the key paths observed on
    ///   `model`; `==` runs unlocked (it may run user code).
    static func existingSentinel(of model: AnyObject, keyPath: AnyKeyPath) -> _ModelSentinel? {
        let candidates = sentinels(of: ObjectIdentifier(model), keyPathHash: keyPath.hashValue)
        return candidates.first { candidate in
            candidate.keyPath == keyPath && candidate.channel.object.load() === model && !candidate.channel.isTornDown
        }
    }

    /// The sentinel of `keyPath` on `model` (which the caller holds), made
    /// on first use; `nil` if `model` is being destroyed.
    ///
    /// - Complexity: O(*k*) in the key paths observed on the model.
    static func sentinel(of model: AnyObject, keyPath: AnyKeyPath) -> _ModelSentinel {
        let modelID = ObjectIdentifier(model)
        let hash = keyPath.hashValue
        while true {
            // Compared unlocked: `==` on key paths may run user code.
            let candidates = sentinels(of: modelID, keyPathHash: hash)
            for candidate in candidates where candidate.keyPath == keyPath {
                // A sentinel left by a dead model at this address (weak
                // probes: the address may be reused) is not this model's.
                if candidate.channel.object.load() === model, !candidate.channel.isTornDown { return candidate }
                candidate.modelDied()
            }
            let examined = Set(candidates.map(ObjectIdentifier.init))
            let made = _ModelSentinel(model: model, keyPath: keyPath, keyPathHash: hash)
            let filed = table.withLock { table -> Bool in
                var slots = table[modelID] ?? []
                // Another thread filed one meanwhile: compare again.
                let isNew = { (slot: Slot) in
                    slot.keyPathHash == hash && slot.sentinel.map { !examined.contains(ObjectIdentifier($0)) } == true
                }
                if slots.contains(where: isNew) { return false }
                slots.removeAll { $0.sentinel == nil }
                slots.append(Slot(sentinel: made, keyPathHash: hash))
                table[modelID] = slots
                return true
            }
            if filed {
                made.startWatching(model)
                return made
            }
        }
    }

    /// Removes `sentinel`'s slot (from its `deinit`).
    fileprivate static func remove(_ sentinel: _ModelSentinel) {
        table.withLock { table in
            guard var slots = table[sentinel.modelID] else { return }
            // `sentinel` is deinitializing: its weak references read nil.
            slots.removeAll { $0.sentinel == nil }
            if slots.isEmpty { table[sentinel.modelID] = nil } else { table[sentinel.modelID] = slots }
        }
    }

    /// The live sentinels of `model`'s key paths (tests).
    static func _sentinels(of model: AnyObject) -> [_ModelSentinel] {
        table.withLock { ($0[ObjectIdentifier(model)] ?? []).compactMap(\.sentinel) }
    }

    /// The number of live sentinels of models of class `type` (tests).
    static func _count(ofModelsOf type: AnyClass) -> Int {
        let type = ObjectIdentifier(type)
        return table.withLock { table in
            table.values.reduce(0) { $0 + $1.count { $0.sentinel?.modelType == type } }
        }
    }
}
