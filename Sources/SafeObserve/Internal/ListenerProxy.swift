/// The listener's side of its relations: which objects it observes, and
/// which key paths of each.
///
/// A proxy lives in the listener's ``ObserverLifetime`` (listeners adopting
/// ``SafeObserver``, torn down inside their own `deinit`) or in the global
/// ``_ProxyTable`` (any other class, torn down by the sweep, by the next change
/// that reaches a dead listener, or by the observed object's death).
final class _ListenerProxy: Sendable {
    struct State {
        /// Active relations, filed under their observed object.
        var relations = _AddressTable<_Relation>()
        var isTornDown = false
    }

    let state = _Mutex(State())

    /// The listener, never retained (probed with `swift_tryRetain`): one
    /// reference per listener, which all its relations share.
    let listener: _UnretainedReference

    init(listener: AnyObject) {
        self.listener = _UnretainedReference(listener)
    }

    /// Records `candidate`, unless the proxy already holds an active relation
    /// for the same object, key path and channel: then returns that one
    /// (deduplication) and `candidate` is dropped.
    ///
    /// `nil` when the proxy was torn down (its listener is being destroyed).
    /// A relation with the same object identity but another channel belongs to
    /// a dead object whose address was reused: it is replaced, never reused.
    ///
    /// - Complexity: O(*k*) expected, *k* being the key paths observed on the
    ///   candidate's object.
    func insert(_ candidate: _Relation) -> (relation: _Relation, inserted: Bool)? {
        let object = candidate.objectID
        let keyPath = candidate.keyPath
        var existing: _Relation?
        var stale: _Relation?
        let accepted = state.withLock { state -> Bool in
            guard !state.isTornDown else { return false }
            let sameKeyPath = { (relation: _Relation) in relation.keyPath === keyPath || relation.keyPath == keyPath }
            if let found = state.relations.first(under: object, where: sameKeyPath) {
                if found.isActive, found.channel === candidate.channel {
                    existing = found
                    return true
                }
                // Ended (its `forget` is on its way) or stale: replace it.
                state.relations.remove(under: object) { $0 === found }
                stale = found
            }
            state.relations.insert(candidate)
            return true
        }
        stale?.end()
        guard accepted else { return nil }
        if let existing { return (existing, false) }
        return (candidate, true)
    }

    /// Forgets `relation` (already ended by the caller).
    ///
    /// - Complexity: O(1) expected.
    func forget(_ relation: _Relation) {
        let released = state.withLock { state in
            state.relations.remove(under: relation.objectID) { $0 === relation }
        }
        // The proxy's reference is dropped here, unlocked.
        _ = released
    }

    /// The active relations, on every object (introspection).
    ///
    /// - Complexity: O(*n*).
    func activeRelations() -> [_Relation] {
        state.withLock { state in state.relations.elements.filter(\.isActive) }
    }

    /// Ends the relations on `object` — only the one on `keyPath` when given.
    ///
    /// They are marked ended under the lock, like ``removeAll(final:)``
    /// does, so that no caller returns while one of them still delivers;
    /// detaching them from their channels happens after unlocking.
    ///
    /// - Complexity: O(*k*) expected, *k* being the key paths observed on `object`.
    func endRelations(on object: ObjectIdentifier, keyPath: AnyKeyPath?) {
        // The first one inline: one key path per call is the common case and
        // must not allocate.
        let (first, others) = state.withLock { state -> (_Relation?, [_Relation]) in
            var first: _Relation?
            var others: [_Relation] = []
            while let relation = state.relations.remove(
                under: object, where: { keyPath == nil || $0.keyPath === keyPath || $0.keyPath == keyPath })
            {
                if relation.markEnded() {
                    if first == nil { first = relation } else { others.append(relation) }
                }
                // One relation per key path: done once it is found.
                if keyPath != nil { break }
            }
            return (first, others)
        }
        first?.detachFromObservedSide()
        for relation in others { relation.detachFromObservedSide() }
    }

    /// Removes every relation; with `final`, the proxy accepts no new ones.
    ///
    /// - Complexity: O(*n*) in the listener's relations.
    func removeAll(final: Bool) {
        // The relations are marked ended under the lock: a concurrent
        // unobserve that finds this proxy empty must never return while one
        // of them still delivers. Detaching them from their channels (which
        // releases the handlers) happens after unlocking.
        let ended = state.withLock { state -> [_Relation] in
            if final { state.isTornDown = true }
            return state.relations.removeAll().filter { $0.markEnded() }
        }
        for relation in ended {
            relation.detachFromObservedSide()
        }
    }

    /// Finds the proxy of `listener`: its ``ObserverLifetime`` if it adopts
    /// ``SafeObserver``, the global table's entry otherwise.
    ///
    /// With `create: false`, nothing is ever allocated (safe inside `deinit`).
    static func of(_ listener: AnyObject, create: Bool) -> _ListenerProxy? {
        if let lifetime = _ObserverLifetimeLookup.lifetime(of: listener) {
            return lifetime.proxy(for: listener, create: create)
        }
        return _ProxyTable.shared.proxy(for: listener, create: create)
    }
}

extension _Relation: _AddressKeyed {
    var tableKey: ObjectIdentifier { objectID }
}

/// Proxies of listeners that do not adopt ``SafeObserver``.
///
/// Such a listener cannot be given a `deinit` hook on Linux, so its proxy is
/// kept here, next to a reference that tells whether it is alive. Each new
/// entry inspects two old ones (round-robin) and tears down those whose
/// listener died, so dead entries never outnumber live ones by more than a
/// constant factor, with O(1) work per registration.
final class _ProxyTable: Sendable {
    struct Entry: Sendable, _AddressKeyed {
        /// The listener's identity when it registered.
        let id: ObjectIdentifier
        /// The listener's proxy. Its reference to the listener (never
        /// retained) tells whether the listener is alive; on Linux it also
        /// keeps the listener's allocation, so its address is not reused
        /// meanwhile.
        let proxy: _ListenerProxy

        var tableKey: ObjectIdentifier { id }
    }

    struct State {
        var entries = _AddressTable<Entry>()
        /// Round-robin position of the sweep, a slot of `entries`.
        var sweepCursor = 0
    }

    static let shared = _ProxyTable()

    let state = _Mutex(State())

    /// - Complexity: Amortized O(1) expected.
    func proxy(for listener: AnyObject, create: Bool) -> _ListenerProxy? {
        let id = ObjectIdentifier(listener)
        // Fast path: the listener already has its proxy. An entry at this
        // address is this listener's — alive, or inside its deinit
        // (registering from a deinit is refused earlier) — unless the
        // platform can reuse a dead listener's address before its entry is
        // swept (then it is replaced below).
        let existing = state.withLock { state -> _ListenerProxy? in
            state.entries.first(under: id) { entry in
                !create || entry.proxy.listener.isAlive(heldByCaller: listener) ? entry.proxy : nil
            }
        }
        guard create, existing == nil else { return existing }
        return insertProxy(for: listener, id: id)
    }

    private func insertProxy(for listener: AnyObject, id: ObjectIdentifier) -> _ListenerProxy {
        let (proxy, candidates, replaced) = state.withLock { state -> (_ListenerProxy, [Entry], Entry?) in
            if let entry = state.entries.first(under: id, where: { _ in true }),
                entry.proxy.listener.isAlive(heldByCaller: listener)
            {
                return (entry.proxy, [], nil)  // another thread inserted it meanwhile
            }
            let replaced = state.entries.remove(under: id) { _ in true }
            // Amortized sweep: two old entries per new one, probed after
            // unlocking (a liveness check must not run under the lock).
            let candidates = [Self.nextSweepCandidate(&state), Self.nextSweepCandidate(&state)].compactMap { $0 }
            let proxy = _ListenerProxy(listener: listener)
            state.entries.insert(Entry(id: id, proxy: proxy))
            return (proxy, candidates, replaced)
        }
        replaced?.proxy.removeAll(final: true)
        for (index, candidate) in candidates.enumerated() where index == 0 || candidate.proxy !== candidates[0].proxy {
            removeIfDead(candidate)
        }
        return proxy
    }

    /// The next entry, round-robin, for the sweep.
    private static func nextSweepCandidate(_ state: inout State) -> Entry? {
        // Empty slots are at most 3/4 of the table: a few steps find an entry.
        for _ in 0..<state.entries.capacity {
            if state.sweepCursor >= state.entries.capacity { state.sweepCursor = 0 }
            defer { state.sweepCursor += 1 }
            if let entry = state.entries.element(inSlot: state.sweepCursor) { return entry }
        }
        return nil
    }

    /// Removes, and tears down, `entry` if its listener died; returns whether
    /// it did.
    @discardableResult
    private func removeIfDead(_ entry: Entry) -> Bool {
        guard entry.proxy.listener.isGone else { return false }
        let removed = state.withLock { state in
            state.entries.remove(under: entry.id) { $0.proxy === entry.proxy }
        }
        removed?.proxy.removeAll(final: true)
        return removed != nil
    }

    /// Tears down every entry whose listener died; returns how many.
    @discardableResult
    func sweepAll() -> Int {
        state.withLock { $0.entries.elements }.reduce(0) { count, entry in count + (removeIfDead(entry) ? 1 : 0) }
    }

    /// Entries, live or not yet swept (leak tests).
    var count: Int {
        state.withLock { $0.entries.count }
    }
}
