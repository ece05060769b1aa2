/// Keeps one relation on a derived key path up to date: a dotted path
/// (`\.account.balance`), an optional chain (`\.child?.count`) or a computed
/// property (`\.fullName`) — anything whose value is read from `@Observed`
/// properties.
///
/// The derivation watches every property the key path's last evaluation read
/// (its *dependencies*), each through an ordinary relation on that property's
/// channel whose listener is the derivation. When one of them changes, it
/// evaluates the key path again with a tracker installed, re-binds to the
/// properties that evaluation read (so replacing an intermediate object, or a
/// computed property taking another branch, moves the observation), and
/// delivers the new value to the user's relation.
///
/// - Old values (`.old`, `.prior`): the dependencies are then registered with
///   `.prior`, and the key path is evaluated in that phase, before the store;
///   the value waits, keyed by thread and dependency, for that dependency's
///   change that follows (a handler may cause a nested change). A dependency
///   dropped or torn down before its change arrives takes its waiting values
///   with it, so a captured old value never outlives the change it was for.
/// - Lifetimes: the user's relation owns the derivation; the derivation holds
///   the relation and the root object unretained, probing both. When a
///   dependency's object dies, its channel tells the derivation: if the root
///   died, the relation ends (and its handler is released); otherwise the key
///   path is evaluated again.
///
/// - Complexity: Re-binding is O(*d*), *d* being the properties the key path
///   reads; evaluating costs one read of the key path.
@usableFromInline
// @unchecked Sendable: mutable state only inside `state`'s lock; the typed subclass adds an immutable key path.
class _Derivation: @unchecked Sendable {
    struct State {
        /// The user's relation (unretained: it owns this derivation).
        var relation: _UnretainedReference?
        /// The observed root object (unretained).
        var root: _UnretainedReference?
        /// The dependency relations, one per channel. A key path reads a
        /// handful of properties: a list beats hashing.
        var dependencies: [_Relation] = []
        /// Values captured before a change, per thread and dependency channel,
        /// most recent last.
        var pendingOld: [(thread: UInt, channel: ObjectIdentifier, value: Any)] = []
        var isStopped = false

        /// Takes the value captured on `thread` for the coming change of the
        /// dependency on `channel`, if any (the most recent: changes nest).
        @inline(__always)
        mutating func takePendingOld(thread: UInt, channel: ObjectIdentifier) -> Any? {
            guard let index = pendingOld.lastIndex(where: { $0.thread == thread && $0.channel == channel })
            else { return nil }
            return pendingOld.remove(at: index).value
        }

        /// Removes the values waiting for a change of one of `dependencies`,
        /// which no longer deliver (so would never collect them); the caller
        /// releases them unlocked.
        mutating func abandonPendingOld(of dependencies: [_Relation]) -> [Any] {
            guard !pendingOld.isEmpty else { return [] }
            var abandoned: [Any] = []
            pendingOld.removeAll { entry in
                let isAbandoned = dependencies.contains { $0.channel.map(ObjectIdentifier.init) == entry.channel }
                if isAbandoned { abandoned.append(entry.value) }
                return isAbandoned
            }
            return abandoned
        }
    }

    /// The dependency relations' proxy (so that they end like any relation),
    /// whose listener is this derivation.
    // nonisolated(unsafe), @exclusivity(unchecked): written once, by `init`
    // (the proxy needs `self`), before the derivation is shared; only read after.
    @exclusivity(unchecked) private(set) nonisolated(unsafe) var proxy: _ListenerProxy!
    let state = _Mutex(State())

    @usableFromInline
    init() {
        proxy = _ListenerProxy(listener: self)
    }

    // MARK: Typed operations (overridden by `_TypedDerivation`)

    /// Reads the key path on `root`. User code: call it unlocked.
    func evaluate(_ root: AnyObject) -> Any {
        preconditionFailure("_Derivation.evaluate(_:) must be overridden")
    }

    /// Delivers a change to `relation`'s handler.
    func deliver(_ relation: _Relation, to listener: AnyObject, root: AnyObject, new: Any?, old: Any?, isPrior: Bool) {
        preconditionFailure("_Derivation.deliver(_:to:root:new:old:isPrior:) must be overridden")
    }

    // MARK: Lifecycle

    /// Starts watching the properties `accesses` (the registration's read) found.
    func start(relation: _Relation, root: AnyObject, accesses: [_Access]) {
        state.withLock { state in
            state.relation = _UnretainedReference(relation)
            state.root = _UnretainedReference(root)
        }
        rebind(to: accesses, options: relation.options)
    }

    /// Stops watching (the user's relation ended). Idempotent.
    func stop() {
        let released = state.withLock { state in
            state.isStopped = true
            defer {
                state.dependencies = []
                state.pendingOld = []
            }
            return (state.dependencies, state.pendingOld)
        }
        proxy.removeAll(final: true)
        _ = released  // released unlocked: an old value may be an object whose deinit runs user code
    }

    /// Makes the dependencies exactly the properties in `accesses`.
    ///
    /// - Complexity: O(*d*), *d* being the properties the key path reads:
    ///   linear scans for a handful (a chain or a small computed property),
    ///   identity sets beyond that. Allocations only for what changed.
    private func rebind(to accesses: [_Access], options: ObservationOptions) {
        // The prior phase is only needed to capture old values.
        let dependencyOptions: ObservationOptions = options.contains(.old) || options.contains(.prior) ? .prior : []
        let (dropped, added, abandoned) = state.withLock { state -> ([_Relation], [_Relation], [Any]) in
            guard !state.isStopped else { return ([], [], []) }
            let isSmall = accesses.count <= 8 && state.dependencies.count <= 8
            let wanted = isSmall ? [] : Set(accesses.lazy.map { ObjectIdentifier($0.channel) })
            var dropped: [_Relation] = []
            state.dependencies.removeAll { relation in
                let stays =
                    isSmall
                    ? accesses.contains { $0.channel === relation.channel }
                    : relation.channel.map { wanted.contains(ObjectIdentifier($0)) } ?? false
                if !stays { dropped.append(relation) }
                return !stays
            }
            let abandoned = dropped.isEmpty ? [] : state.abandonPendingOld(of: dropped)
            var bound = isSmall ? [] : Set(state.dependencies.lazy.compactMap { $0.channel.map(ObjectIdentifier.init) })
            var added: [_Relation] = []
            for access in accesses {
                if isSmall {
                    guard !state.dependencies.contains(where: { $0.channel === access.channel }) else { continue }
                } else {
                    guard bound.insert(ObjectIdentifier(access.channel)).inserted else { continue }
                }
                // Captured strongly, like the relation's own reference to it (both
                // let go when the relation is released); one reference is
                // the closure's whole context, so nothing is allocated for it.
                let channel = access.channel
                let relation = _Relation(
                    keyPath: access.wrappedKeyPath, objectID: ObjectIdentifier(access.object),
                    options: dependencyOptions, proxy: proxy, channel: access.channel, isDependency: true,
                    deliver: { derivation, _, _, phase in
                        // unsafeDowncast: a dependency's listener is always its
                        // derivation (only this closure is stored with `isDependency`).
                        let derivation = unsafeDowncast(derivation, to: _Derivation.self)
                        switch phase {
                        case .prior: derivation.dependencyChanged(on: ObjectIdentifier(channel), isPrior: true)
                        case .change: derivation.dependencyChanged(on: ObjectIdentifier(channel), isPrior: false)
                        case .priorAbandoned: derivation.priorPhaseAbandoned(on: ObjectIdentifier(channel))
                        }
                    })
                state.dependencies.append(relation)
                added.append(relation)
            }
            return (dropped, added, abandoned)
        }
        _ = abandoned  // released unlocked
        for relation in dropped { relation.end() }
        for relation in added {
            // One dependency per channel: the proxy never holds an active one
            // for it already (if it did, this one would be a duplicate).
            var existing: _Relation?
            guard proxy.insert(relation, existing: &existing), existing == nil, relation.channel?.add(relation) == true
            else {
                relation.end()
                continue
            }
        }
    }

    // MARK: Introspection

    /// The user's relation, while it is active, if `object` is its root.
    func relation(rootedAt object: AnyObject) -> _Relation? {
        let (relationReference, rootReference) = state.withLock { state in (state.relation, state.root) }
        // Unmanaged without a retain: only the caller's object's address is compared.
        guard rootReference?.address == Unmanaged.passUnretained(object).toOpaque(),
            let relationObject = relationReference?.load()
        else { return nil }
        // unsafeDowncast: `state.relation` is only ever made from a `_Relation`.
        let relation = unsafeDowncast(relationObject, to: _Relation.self)
        return relation.isActive ? relation : nil
    }

    /// The user's relation, while it is active, and its root, while alive.
    func rootedRelation() -> (_Relation, AnyObject)? {
        let (relationReference, rootReference) = state.withLock { state in (state.relation, state.root) }
        guard let relationObject = relationReference?.load(), let root = rootReference?.load() else { return nil }
        // unsafeDowncast: `state.relation` is only ever made from a `_Relation`.
        let relation = unsafeDowncast(relationObject, to: _Relation.self)
        return relation.isActive ? (relation, root) : nil
    }

    // MARK: Changes

    /// The user's relation and the root, if both are still there; ends the
    /// relation when the root died.
    private func relationAndRoot() -> (relation: _Relation, root: AnyObject)? {
        let (relationReference, rootReference) = state.withLock { state in (state.relation, state.root) }
        guard let relationObject = relationReference?.load() else { return nil }
        // unsafeDowncast: `state.relation` is only ever made from a `_Relation`.
        let relation = unsafeDowncast(relationObject, to: _Relation.self)
        guard relation.isActive else { return nil }
        guard let root = rootReference?.load() else {
            relation.end()
            return nil
        }
        return (relation, root)
    }

    /// The dependency on `channel` changed: before the store (`isPrior`) or
    /// after it.
    func dependencyChanged(on channel: ObjectIdentifier, isPrior: Bool) {
        guard let (relation, root) = relationAndRoot() else { return }
        if isPrior {
            let old = evaluate(root)
            let thread = _currentThreadID()
            state.withLock { state in
                if !state.isStopped { state.pendingOld.append((thread, channel, old)) }
            }
            if relation.options.contains(.prior), let listener = relation.listener.load() {
                deliver(relation, to: listener, root: root, new: nil, old: old, isPrior: true)
            }
            return
        }
        let thread = _currentThreadID()
        let old = state.withLock { $0.takePendingOld(thread: thread, channel: channel) }
        refresh(relation: relation, root: root, old: old)
    }

    /// The change of the dependency on `channel` announced in the prior phase
    /// was abandoned (its mutation threw): drops the old value captured for it.
    func priorPhaseAbandoned(on channel: ObjectIdentifier) {
        let thread = _currentThreadID()
        let old = state.withLock { $0.takePendingOld(thread: thread, channel: channel) }
        _ = old  // released unlocked
    }

    /// A dependency's object died (its channel was torn down, inside that
    /// object's `deinit`). If it was the root, the relation ends. Otherwise
    /// the dependency is forgotten and nothing is evaluated: the key path may
    /// reach the dying object through an `unowned` reference, and reading it
    /// now would trap. (A weak reference that becomes `nil` is not a change,
    /// as with Key-Value Observing; the next change of another dependency
    /// evaluates the key path again.)
    ///
    /// If that was the last dependency (the root reads no `@Observed`
    /// property of its own, and everything it reached died), nothing can
    /// change the value any more: the relation ends and releases its handler.
    func dependencyTornDown(_ dependency: _Relation) {
        guard let (relation, _) = relationAndRoot() else { return }
        let (forgotten, isInert) = state.withLock { state -> ((_Relation, [Any])?, Bool) in
            guard let index = state.dependencies.firstIndex(where: { $0 === dependency }) else { return (nil, false) }
            let relation = state.dependencies.remove(at: index)
            return ((relation, state.abandonPendingOld(of: [relation])), state.dependencies.isEmpty)
        }
        _ = forgotten  // released unlocked
        if isInert { relation.end() }
    }

    /// Evaluates the key path, re-binds, and delivers the new value.
    ///
    /// An evaluation that read no `@Observed` property leaves nothing that
    /// could change the value again: the value is delivered, then the
    /// relation ends.
    private func refresh(relation: _Relation, root: AnyObject, old: Any?) {
        var new: Any?
        let accesses = _AccessTracker.resolve { new = evaluate(root) }
        rebind(to: accesses, options: relation.options)
        guard relation.isActive else { return }
        guard let listener = relation.listener.load() else {
            relation.end()
            return
        }
        deliver(relation, to: listener, root: root, new: new, old: old, isPrior: false)
        if accesses.isEmpty { relation.end() }
    }
}

/// The typed half of a derivation, created in the caller's module by
/// `safeObserve` (where `Root` and `Value` are known).
@usableFromInline
// @unchecked Sendable: adds only an immutable key path to `_Derivation`.
final class _TypedDerivation<Root: AnyObject, Value>: _Derivation, @unchecked Sendable {
    let keyPath: KeyPath<Root, Value>

    @usableFromInline
    init(keyPath: KeyPath<Root, Value>) {
        self.keyPath = keyPath
        super.init()
    }

    override func evaluate(_ root: AnyObject) -> Any {
        // unsafeDowncast: the root of a derivation is always its key path's root.
        unsafeDowncast(root, to: Root.self)[keyPath: keyPath]
    }

    override func deliver(
        _ relation: _Relation, to listener: AnyObject, root: AnyObject, new: Any?, old: Any?, isPrior: Bool
    ) {
        // The values were produced by `evaluate`, so they are `Value`s.
        let change = ObservedChange<Value>(newValue: new.map { $0 as! Value }, oldValue: old.map { $0 as! Value })
        withUnsafePointer(to: change) { relation.deliver(listener, root, $0, isPrior ? .prior : .change) }
    }
}
