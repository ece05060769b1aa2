import Synchronization

/// What a ``_ListenerProxy`` guards with its lock (the proxy is its own
/// lock storage, see ``_LockedStorage``).
struct _ListenerProxyState {
    /// Active relations: a single property's under its observed object, a
    /// derived key path's under its object and key-path hash (see
    /// ``_Relation/tableKey``), so that one listener observing many
    /// derived key paths of one object finds each in O(1).
    var relations = _AddressTable<_Relation>()
    /// How many derived relations each object has here (to end them all
    /// with the object's others).
    var derivedCounts: [ObjectIdentifier: Int] = [:]
    var isTornDown = false
    /// Whether ``_ProxyFinalizers`` holds actions for this proxy (kept
    /// there, not here, so that proxies without any pay nothing: this
    /// flag fits in the state's padding).
    var hasFinalizers = false

    /// Files `relation`.
    @inline(__always)
    mutating func file(_ relation: _Relation) {
        if relation.channel == nil { countDerived(on: relation.objectID) }
        relations.insert(relation)
    }

    @inline(never)
    private mutating func countDerived(on object: ObjectIdentifier) {
        derivedCounts[object, default: 0] += 1
    }

    /// Takes `relation` out, if it is filed.
    @discardableResult @inline(__always)
    mutating func unfile(_ relation: _Relation) -> _Relation? {
        guard let removed = relations.remove(under: relation.tableKey, where: { $0 === relation }) else {
            return nil
        }
        if removed.channel == nil { uncount(removed.objectID) }
        return removed
    }

    /// Takes out every relation on `object`.
    mutating func unfileAll(on object: ObjectIdentifier) -> [_Relation] {
        var removed: [_Relation] = []
        // A derived key may equal the identity of a statically allocated
        // object (8-byte aligned): check the object.
        while let relation = relations.remove(under: object, where: { $0.objectID == object }) {
            removed.append(relation)
        }
        if derivedCounts[object] != nil {
            // Filed under (object, hash) keys: found by a scan, which only
            // objects with derived relations here pay.
            for relation in relations.elements where relation.objectID == object {
                if let taken = unfile(relation) { removed.append(taken) }
            }
        }
        return removed
    }

    @inline(never)
    private mutating func uncount(_ object: ObjectIdentifier) {
        if let count = derivedCounts[object], count > 1 {
            derivedCounts[object] = count - 1
        } else {
            derivedCounts[object] = nil
        }
    }

    /// Files `candidate`, given the relation `found` on the same object
    /// and key path (if any): dedupes onto an active one on the same
    /// channel, or replaces an ended or stale one (returned in `stale`,
    /// for the caller to end unlocked).
    @inline(__always)
    mutating func settle(
        _ candidate: _Relation, found: _Relation?, existing: inout _Relation?, stale: inout _Relation?
    ) -> Bool {
        if let found {
            if found.isActive, found.channel === candidate.channel {
                existing = found
                return true
            }
            // Ended (its `forget` is on its way) or stale: replace it.
            unfile(found)
            stale = found
        }
        file(candidate)
        return true
    }
}

/// The listener's side of its relations: which objects it observes, and
/// which key paths of each.
///
/// A proxy lives in the listener's ``ObserverLifetime`` (listeners adopting
/// ``SafeObserver``, torn down inside their own `deinit`) or in the global
/// ``_ProxyTable`` (any other class, torn down by the sweep, by the next change
/// that reaches a dead listener, or by the observed object's death). A
/// derivation has one too, for its dependencies' listener reference only:
/// it files none of them (see ``filesRelations``).
// @unchecked Sendable: the lock (inherited) guards `state`; every other
// stored property is immutable.
final class _ListenerProxy: _LockedStorage<_ListenerProxyState>, @unchecked Sendable {
    typealias State = _ListenerProxyState

    /// The listener, never retained (probed with `swift_tryRetain`): one
    /// reference per listener, which all its relations share.
    let listener: _UnretainedReference

    /// The listener's identity: the proxy table files the proxy under it.
    let listenerID: ObjectIdentifier

    /// Whether the proxy is filed in the ``_ProxyTable`` (a listener that
    /// does not adopt ``SafeObserver``), rather than in an
    /// ``ObserverLifetime`` or a derivation.
    let isInProxyTable: Bool

    /// Whether the proxy files its relations (a listener's proxy), or only
    /// lends them its listener (a derivation's: its state machine lists its
    /// dependencies, one per channel, and ends them itself; filing them
    /// here too cost two locked table updates per dependency re-bound).
    let filesRelations: Bool

    /// Set once a proxy-table proxy is retired because its last relation
    /// ended (readable without its lock; a proxy torn down otherwise, by
    /// `removeAll(final:)`, is taken out of the table by that caller): an
    /// object's death that retires many proxies takes them all out of the
    /// table in one pass (see ``_ProxyTable/removeRetired(_:_:)``), and
    /// look-ups skip a retired proxy whose entry is not out yet.
    let isRetired = Atomic<Bool>(false)

    init(listener: AnyObject, isInProxyTable: Bool = false, filesRelations: Bool = true) {
        self.listener = _UnretainedReference(listener)
        listenerID = ObjectIdentifier(listener)
        self.isInProxyTable = isInProxyTable
        self.filesRelations = filesRelations
        super.init(State())
    }

    /// Takes a proxy-table proxy left with no relation out of the table, so
    /// that a listener whose relations all ended — its objects died — keeps
    /// nothing allocated in SafeObserve, whether it is alive or dies later.
    ///
    /// Called where relations end because their object died (cold paths);
    /// never on explicit removal, so a listener that observes and unobserves
    /// in a loop keeps its proxy. A registration that raced with the
    /// retirement finds the proxy torn down and retries with a new one.
    ///
    /// - Complexity: O(1) expected.
    func retireIfEmpty() {
        guard isInProxyTable else { return }
        if withLock({ retire(&$0) }) { _ProxyTable.removeRetired(self, []) }
    }

    /// Under the lock: retires a proxy-table proxy left with no relation
    /// (torn down, ``isRetired`` set); whether it did.
    private func retire(_ state: inout State) -> Bool {
        guard isInProxyTable, !state.isTornDown, state.relations.isEmpty, !state.hasFinalizers else { return false }
        state.isTornDown = true
        isRetired.store(true, ordering: .relaxed)
        return true
    }

    /// Records `candidate`, unless the proxy already holds an active relation
    /// for the same object and property: then sets `existing` to that one
    /// (deduplication) and leaves `candidate` out.
    ///
    /// A single `@Observed` property is identified by its channel, whatever
    /// key path spelled it (`\Base.count` and `\Sub.count` are one relation);
    /// a derived key path by key-path equality.
    ///
    /// `false` when the proxy was torn down (its listener is being destroyed).
    /// A relation with the same object identity and key path but another
    /// channel belongs to a dead object whose address was reused: it is
    /// replaced, never reused.
    ///
    /// - Complexity: O(*k*) expected, *k* being the key paths observed on the
    ///   candidate's object.
    func insert(_ candidate: _Relation, existing: inout _Relation?) -> Bool {
        assert(filesRelations, "_ListenerProxy: a derivation's dependencies are filed by its state machine")
        // Channels and key paths are compared by identity under the lock, and
        // derived key paths by `==` only after unlocking (see
        // `_KeyPathMatcher`). The common case — no other derived key path on
        // the object, or an identical one — is settled at once.
        var stale: _Relation?
        let accepted = withLock { state -> Bool? in
            guard !state.isTornDown else { return false }
            var found: _Relation?
            var isUnsure = false
            // Keys may collide (see `_Relation.derivedTableKey`): a match on
            // a channel implies the object; any other match checks it.
            state.relations.forEach(under: candidate.tableKey) { relation in
                guard
                    relation.isOnSameProperty(as: candidate)
                        || (relation.keyPath === candidate.keyPath && relation.objectID == candidate.objectID)
                else {
                    // Another derived key path with the same hash may still be equal.
                    if candidate.channel == nil, relation.objectID == candidate.objectID,
                        // unsafeDowncast: a relation made without a channel is a `_DerivedRelation`.
                        relation.mayEqualDerivedKeyPath(
                            hashed: unsafeDowncast(candidate, to: _DerivedRelation.self).keyPathHash)
                    {
                        isUnsure = true
                    }
                    return true
                }
                found = copy relation
                return false
            }
            if found == nil, isUnsure { return nil }
            return state.settle(candidate, found: found, existing: &existing, stale: &stale)
        }
        guard let accepted else { return insertComparingKeyPaths(candidate, existing: &existing) }
        stale?.end()
        return accepted
    }

    /// ``insert(_:existing:)`` when the object has relations on key paths
    /// that are not identical to the candidate's: compares them unlocked, then
    /// retries with the verdicts known.
    @inline(never)
    private func insertComparingKeyPaths(_ candidate: _Relation, existing: inout _Relation?) -> Bool {
        var matcher = _KeyPathMatcher()
        // Only derived key paths come here (a candidate on a channel is
        // settled by identity above).
        // unsafeDowncast: a relation made without a channel is a `_DerivedRelation`.
        let hash = unsafeDowncast(candidate, to: _DerivedRelation.self).keyPathHash
        while true {
            var stale: _Relation?
            let accepted = withLock { state -> Bool? in
                guard !state.isTornDown else { return false }
                var found: _Relation?
                state.relations.forEach(under: candidate.tableKey) { relation in
                    guard relation.objectID == candidate.objectID, relation.mayEqualDerivedKeyPath(hashed: hash),
                        matcher.matches(relation.keyPath, candidate.keyPath) == true
                    else {
                        return true
                    }
                    found = copy relation
                    return false
                }
                if found == nil, matcher.needsComparison { return nil }
                return state.settle(candidate, found: found, existing: &existing, stale: &stale)
            }
            if let accepted {
                stale?.end()
                return accepted
            }
            matcher.compareQueued(with: candidate.keyPath)
        }
    }

    /// ``forget(_:)``, then, if that left a proxy-table proxy with no
    /// relation, retires it as ``retireIfEmpty()`` does, in the same
    /// critical section; returns whether it did. The caller then takes it
    /// out of the table with ``_ProxyTable/removeRetired(_:_:)``.
    ///
    /// - Complexity: O(1) expected.
    func forgetRetiringIfEmpty(_ relation: _Relation) -> Bool {
        guard filesRelations else { return false }
        let (released, retired) = withLock { state -> (_Relation?, Bool) in
            let released = state.unfile(relation)
            return (released, retire(&state))
        }
        // The proxy's reference is dropped here, unlocked.
        _ = released
        return retired
    }

    /// Forgets `relation` (already ended by the caller).
    ///
    /// - Complexity: O(1) expected.
    func forget(_ relation: _Relation) {
        guard filesRelations else { return }
        let released = withLock { state in
            state.unfile(relation)
        }
        // The proxy's reference is dropped here, unlocked.
        _ = released
    }

    /// The active relations, on every object (introspection).
    ///
    /// - Complexity: O(*n*).
    func activeRelations() -> [_Relation] {
        withLock { state in state.relations.elements.filter(\.isActive) }
    }

    /// Ends the relations on `object` — only the one on `keyPath` when given.
    ///
    /// They are marked ended under the lock, like ``removeAll(final:)``
    /// does, so that no caller returns while one of them still delivers;
    /// detaching them from their channels happens after unlocking.
    ///
    /// A relation on a single `@Observed` property registered with another
    /// spelling of `keyPath` (`\Base.count` for `\Sub.count`) is found
    /// through `channel`, which resolves `keyPath` and is called (unlocked)
    /// only when no key path matched but the object has such relations.
    ///
    /// - Complexity: O(*k*) expected, *k* being the key paths observed on `object`.
    func endRelations(on object: ObjectIdentifier, keyPath: AnyKeyPath?, channel: () -> _Channel? = { nil }) {
        guard let keyPath else {
            let ended = withLock { state -> [_Relation] in
                state.unfileAll(on: object).filter { $0.markEnded() }
            }
            for relation in ended { relation.detachFromObservedSide() }
            return
        }
        // One relation per key path. Key paths are compared by identity under
        // the lock, by `==` after unlocking (see `_KeyPathMatcher`).
        var matcher = _KeyPathMatcher()
        // The channel `keyPath` resolves to, and its hash, once needed.
        var resolved: _Channel??
        var hash: Int?
        while true {
            let (ended, retry, needsChannel, needsHash) = withLock { state -> (_Relation?, Bool, Bool, Bool) in
                var sawOtherProperty = false
                // Single properties' relations, under the object.
                var found = state.relations.remove(under: object) { relation in
                    guard relation.objectID == object else { return false }  // a colliding derived key
                    if relation.keyPath === keyPath { return true }
                    guard case .some(let channel) = resolved else {
                        sawOtherProperty = true
                        return false
                    }
                    return relation.channel === channel
                }
                // Derived key paths', under the object and the key path's hash.
                let hasDerived = state.derivedCounts[object] != nil
                if found == nil, hasDerived, let hash {
                    found = state.relations.first(under: _Relation.derivedTableKey(object, hash)) { relation in
                        relation.objectID == object && relation.mayEqualDerivedKeyPath(hashed: hash)
                            && (relation.keyPath === keyPath || matcher.matches(relation.keyPath, keyPath) == true)
                            ? copy relation : nil
                    }
                    if let relation = found { state.unfile(relation) }
                }
                if let relation = found {
                    return (relation.markEnded() ? relation : nil, false, false, false)
                }
                return (nil, matcher.needsComparison, sawOtherProperty, hasDerived && hash == nil)
            }
            ended?.detachFromObservedSide()
            if retry {
                matcher.compareQueued(with: keyPath)
            } else if needsHash {
                hash = keyPath.hashValue  // unlocked: may run user code
            } else if needsChannel {
                resolved = .some(channel())
            } else {
                return
            }
        }
    }

    /// Removes every relation; with `final`, the proxy accepts no new ones.
    ///
    /// - Complexity: O(*n*) in the listener's relations.
    func removeAll(final: Bool) {
        // The relations are marked ended under the lock: a concurrent
        // unobserve that finds this proxy empty must never return while one
        // of them still delivers. Detaching them from their channels (which
        // releases the handlers) happens after unlocking; so does running
        // the finalizers of a final teardown (the listener is gone).
        var hasFinalizers = false
        let ended = withLock { state -> [_Relation] in
            if final {
                state.isTornDown = true
                hasFinalizers = state.hasFinalizers
            }
            state.derivedCounts = [:]
            return state.relations.removeAll().filter { $0.markEnded() }
        }
        for relation in ended {
            relation.detachFromObservedSide()
        }
        if hasFinalizers {
            for action in _ProxyFinalizers.takeAll(of: self) { action() }
        }
    }

    /// Runs `action` once the listener is gone — inside its `deinit` for a
    /// ``SafeObserver``, when the sweep finds it dead otherwise — unless
    /// ``removeFinalizer(_:)`` comes first. Returns its identity, or `nil`
    /// if the listener is already gone (the caller then acts at once).
    func addFinalizer(_ action: @escaping @Sendable () -> Void) -> Int? {
        withLock { state -> Int? in
            guard !state.isTornDown else { return nil }
            state.hasFinalizers = true
            // Filed under this proxy's lock (the table's is a leaf), so that
            // a final teardown, which reads the flag under it, finds it.
            return _ProxyFinalizers.add(action, to: self)
        }
    }

    /// Forgets the finalizer `id`. Idempotent.
    ///
    /// - Complexity: O(1) expected.
    func removeFinalizer(_ id: Int) {
        let removed = withLock { state -> (@Sendable () -> Void)? in
            let (removed, remaining) = _ProxyFinalizers.remove(id, of: self)
            if remaining == 0 { state.hasFinalizers = false }
            return removed
        }
        _ = removed  // released unlocked: the action's captures may be anything
    }

    /// Whether the listener still has a relation on `object` (single
    /// properties are filed under the object, derived key paths counted).
    ///
    /// - Complexity: O(*k*) expected, *k* being the listener's relations on
    ///   `object`.
    func hasRelation(on object: ObjectIdentifier) -> Bool {
        withLock { state in
            state.derivedCounts[object] != nil || state.relations.first(under: object, { _ in true }) != nil
        }
    }

    /// How many finalizers wait (tests).
    var _finalizerCount: Int { _ProxyFinalizers.count(of: self) }

    /// Finds the proxy of `listener`: its ``ObserverLifetime``'s if it adopts
    /// ``SafeObserver``, the proxy table's otherwise.
    ///
    /// With `create: false`, nothing is ever allocated (safe inside `deinit`).
    static func of(_ listener: AnyObject, create: Bool) -> _ListenerProxy? {
        of(listener, create: create, found: _Registry.withLock { $0.lookUp(listener) })
    }

    /// Finishes ``of(_:create:)`` with what the registry's tables `found`
    /// (unlocked: reading `observerLifetime` runs the listener's code).
    @inline(__always)
    static func of(_ listener: AnyObject, create: Bool, found: consuming _Registry.Found) -> _ListenerProxy? {
        // A retired proxy not yet out of the table is not reused (see
        // ``_ProxyTable/existingProxy(of:)``).
        if let proxy = found.proxy.take(), !proxy.isRetired.load(ordering: .relaxed) { return proxy }
        switch found.listenerClass {
        case .observer(let observerType):
            return _ListenerClassCache.proxy(of: listener, as: observerType, create: create)
        case .plain:
            return create ? _ProxyTable.insertProxy(for: listener) : nil
        case .unknown:
            return ofUnknownClass(listener, create: create)
        }
    }

    /// The proxy of `object` if it adopts ``SafeObserver`` (created if
    /// needed), whose finalizers run inside its `deinit`; `nil` for any
    /// other class, which has no such hook (a sender's death hooks: the
    /// hub's filtered channels and sequences).
    static func ofSafeObserver(_ object: AnyObject) -> _ListenerProxy? {
        let observerType: (any SafeObserver.Type)?
        switch _Registry.withLock({ $0.listenerClasses.kind(of: object) }) {
        case .observer(let type): observerType = type
        case .plain: observerType = nil
        case .unknown: observerType = _ListenerClassCache.lookUpSlowly(object)
        }
        guard let observerType else { return nil }
        return _ListenerClassCache.proxy(of: object, as: observerType, create: true)
    }

    @inline(never)
    private static func ofUnknownClass(_ listener: AnyObject, create: Bool) -> _ListenerProxy? {
        if let observerType = _ListenerClassCache.lookUpSlowly(listener) {
            return _ListenerClassCache.proxy(of: listener, as: observerType, create: create)
        }
        let existing = _Registry.withLock { $0.proxies.existingProxy(of: listener) }
        guard create, existing == nil else { return existing }
        return _ProxyTable.insertProxy(for: listener)
    }
}

extension _Relation: _AddressKeyed {
    /// The key of a derived key path with hash `hash` on `object`: the object's
    /// address mixed with the hash, with bit 3 set so that it rarely equals an
    /// object's identity (heap objects are 16-byte aligned; a statically
    /// allocated one may not be). Keys may collide with each other and with
    /// such an identity: every lookup checks the object (and, for derived
    /// key paths, the hash) of what it finds.
    static func derivedTableKey(_ object: ObjectIdentifier, _ hash: Int) -> ObjectIdentifier {
        let bits = (UInt(bitPattern: object) ^ (UInt(bitPattern: hash) &<< 4)) | 8
        // unsafeBitCast: an identity used only as a table key, never as a reference.
        return unsafeBitCast(bits, to: ObjectIdentifier.self)
    }
}
