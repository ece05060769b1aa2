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
// @unchecked Sendable: mutable state only inside `state`'s lock; the typed subclass adds immutable properties.
class _Derivation: @unchecked Sendable {
    /// The dependency relations' proxy (so that they end like any relation),
    /// whose listener is this derivation. It files nothing: the state
    /// machine's `dependencies` are the list, and `stop()` ends them.
    // nonisolated(unsafe), @exclusivity(unchecked): written once, by `init`
    // (the proxy needs `self`), before the derivation is shared; only read after.
    @exclusivity(unchecked) private(set) nonisolated(unsafe) var proxy: _ListenerProxy!
    /// Every transition runs under this lock; what it returns runs after.
    let state = _Mutex(_DerivationStateMachine<_Relation>())

    @usableFromInline
    init() {
        proxy = _ListenerProxy(listener: self, filesRelations: false)
    }

    // MARK: Typed operations (overridden by `_TypedDerivation`)

    /// The key path, for its shape.
    var anyKeyPath: AnyKeyPath {
        preconditionFailure("_Derivation.anyKeyPath must be overridden")
    }

    /// Reads the key path on `root` with a tracker installed, then calls
    /// `body` with what it read and the address of the value it produced (a
    /// `valueType` value, valid during the call). User code: call it
    /// unlocked. The value is never boxed: a change delivers it from there,
    /// as it delivers a chain's last link from its storage.
    func evaluateTracked(_ root: AnyObject, _ body: (_ accesses: [_Access], _ value: UnsafeRawPointer) -> Void) {
        preconditionFailure("_Derivation.evaluateTracked(_:_:) must be overridden")
    }

    /// Reads the key path on `root`. User code: call it unlocked.
    func evaluate(_ root: AnyObject) -> Any {
        preconditionFailure("_Derivation.evaluate(_:) must be overridden")
    }

    /// The key path's value type.
    var valueType: Any.Type {
        preconditionFailure("_Derivation.valueType must be overridden")
    }

    /// A copy of the `valueType` value stored at `address` (a chain's last
    /// link, see ``_ChainLayout``).
    func value(at address: UnsafeRawPointer) -> Any {
        preconditionFailure("_Derivation.value(at:) must be overridden")
    }

    /// Delivers a change to `relation`'s handler.
    func deliver(_ relation: _Relation, to listener: AnyObject, root: AnyObject, new: Any?, old: Any?, isPrior: Bool) {
        preconditionFailure("_Derivation.deliver(_:to:root:new:old:isPrior:) must be overridden")
    }

    /// Delivers a change whose new value is the `valueType` value stored at
    /// `newAddress` (a chain's last link, see ``_ChainLayout``, or a value
    /// just evaluated, see ``evaluateTracked(_:_:)``), copied before the
    /// handler runs.
    func deliver(
        _ relation: _Relation, to listener: AnyObject, root: AnyObject, newAt newAddress: UnsafeRawPointer, old: Any?
    ) {
        preconditionFailure("_Derivation.deliver(_:to:root:newAt:old:) must be overridden")
    }

    // MARK: Lifecycle

    /// Starts watching the properties `accesses` (the registration's read) found.
    func start(relation: _Relation, root: AnyObject, accesses: [_Access]) {
        state.withLock { $0.start(relation: relation, root: root) }
        rebind(to: accesses, root: root, options: relation.options)
    }

    /// Stops watching (the user's relation ended). Idempotent.
    func stop() {
        // The dependencies are marked ended under the lock: a re-bind that
        // made one moments ago then finds it ended, and its channel refuses
        // it (`_Channel.add` checks under the channel's lock, where
        // `detachFromObservedSide` removes it).
        let action = state.withLock { state in
            let action = state.stop()
            for dependency in action.dependencies { _ = dependency.markEnded() }
            return action
        }
        for dependency in action.dependencies { dependency.detachFromObservedSide() }
        // Released unlocked: an old value may be an object whose deinit runs user code.
        _ = action
    }

    /// Makes the dependencies exactly the properties in `accesses` (read
    /// from `root`); `isKnownChain` when they are the links of the chain
    /// whose layout read them.
    ///
    /// - Complexity: O(*d*), *d* being the properties the key path reads.
    ///   Allocations only for what changed.
    private func rebind(
        to accesses: [_Access], root: AnyObject, options: ObservationOptions, isKnownChain: Bool = false
    ) {
        // The prior phase is only needed to capture old values, or — for the
        // last link of a chain, whose phases are forwarded — to deliver it.
        let dependencyOptions: ObservationOptions = options.contains(.old) || options.contains(.prior) ? .prior : []
        let leafOptions = options.intersection([.old, .prior])
        let channels = accesses.lazy.map { ObjectIdentifier($0.channel) }
        // The common case of a computed property: it read what it read before.
        // (A chain's walk runs after a link changed: its links moved.)
        if !isKnownChain, state.withLock({ $0.isBound(exactly: channels) }) { return }
        // Outside the lock: comparing key paths may run user code.
        let links = accesses.lazy.map { ObjectIdentifier($0.wrappedKeyPath) }
        let known = isKnownChain ? true : state.withLock { $0.isChain(links: links) }
        let isChain = known ?? _KeyPathShape.isChain(anyKeyPath, readAs: accesses)
        let layout = known == nil && isChain ? _ChainLayout(reads: accesses, root: root, valueType: valueType) : nil
        // Only a shape found now is remembered (then the links are copied).
        let newShape = known == nil ? Array(links) : nil
        let action = state.withLock { state in
            state.rebind(
                toChannels: accesses.count, at: { ObjectIdentifier(accesses[$0].channel) }, isChain: isChain,
                links: newShape,
                layout: layout
            ) { index in
                // The last link forwards its changes only from an object whose
                // getter is `@Observed`'s (a subclass may override it); a
                // chain's walk reached only such objects.
                let isLeaf =
                    isChain && index == accesses.count - 1
                    && (isKnownChain || accesses[index].isOnItsDeclaringClass)
                return makeDependency(
                    on: accesses[index], options: isLeaf ? leafOptions : dependencyOptions, isLeaf: isLeaf)
            }
        }
        action.forEachDropped { $0.end() }
        // One dependency per channel (the state machine keeps those already
        // bound); a channel torn down meanwhile, or a `stop()` that ended the
        // dependency, refuses it.
        for relation in action.added where !relation.attachToChannel() {
            relation.end()
        }
        _ = action.abandoned  // released unlocked
    }

    /// A dependency on the property `access` read (runs no user code); the
    /// last link of a chain forwards its changes, so it asks for what the
    /// relation's options need (`.old`, `.prior`) and is ordered.
    private func makeDependency(on access: _Access, options: ObservationOptions, isLeaf: Bool) -> _Relation {
        // Captured strongly, like the relation's own reference to it (both
        // let go when the relation is released); one reference is each
        // closure's whole context, so nothing is allocated for it.
        let channel = access.channel
        let deliver: _Deliver
        if isLeaf {
            deliver = { derivation, _, change, phase, _ in
                _Derivation.dependencyDelivers(derivation, ObjectIdentifier(channel), change, phase, isLeaf: true)
            }
        } else {
            deliver = { derivation, _, change, phase, _ in
                _Derivation.dependencyDelivers(derivation, ObjectIdentifier(channel), change, phase, isLeaf: false)
            }
        }
        return _Relation(
            keyPath: access.wrappedKeyPath, objectID: ObjectIdentifier(access.object),
            options: options, proxy: proxy, channel: access.channel, isDependency: true, ordersChanges: isLeaf,
            deliver: deliver)
    }

    /// A dependency's delivery: `derivation` is its listener.
    private static func dependencyDelivers(
        _ derivation: AnyObject, _ channel: ObjectIdentifier, _ change: UnsafeRawPointer, _ phase: _Phase,
        isLeaf: Bool
    ) {
        // unsafeDowncast: a dependency's listener is always its derivation
        // (only `makeDependency` makes relations with `isDependency`).
        let derivation = unsafeDowncast(derivation, to: _Derivation.self)
        switch phase {
        case .prior: derivation.dependencyWillChange(on: channel, change: change, isLeaf: isLeaf)
        case .change: derivation.dependencyDidChange(on: channel, change: change, isLeaf: isLeaf)
        case .priorAbandoned: derivation.priorPhaseAbandoned(on: channel)
        }
    }

    // MARK: Introspection

    /// The user's relation `reference` refers to (the state machine's
    /// `relation`, which ``start(relation:root:accesses:)`` sets), unless its
    /// deinitialization began.
    private static func load(_ reference: _UnretainedReference) -> _Relation? {
        // unsafeDowncast: the state machine's relation is only ever set from
        // the `_Relation` that `start` receives.
        reference.load().map { unsafeDowncast($0, to: _Relation.self) }
    }

    /// The user's relation, while it is active, if `object` is its root.
    func relation(rootedAt object: AnyObject) -> _Relation? {
        let (relationReference, rootReference) = state.withLock { state in (state.relation, state.root) }
        // Unmanaged without a retain: only the caller's object's address is compared.
        guard rootReference?.address == Unmanaged.passUnretained(object).toOpaque(),
            let relation = relationReference.flatMap(Self.load)
        else { return nil }
        return relation.isActive ? relation : nil
    }

    /// The user's relation, while it is active, and its root, while alive.
    func rootedRelation() -> (_Relation, AnyObject)? {
        let (relationReference, rootReference) = state.withLock { state in (state.relation, state.root) }
        guard let relation = relationReference.flatMap(Self.load), let root = rootReference?.load() else {
            return nil
        }
        return relation.isActive ? (relation, root) : nil
    }

    // MARK: Changes

    /// The user's relation and the root, if both are still there; ends the
    /// relation when the root died.
    private func load(_ target: _DerivationStateMachine<_Relation>.Target) -> (relation: _Relation, root: AnyObject)? {
        guard let relation = Self.load(target.relation), relation.isActive else { return nil }
        guard let root = target.root.load() else {
            relation.end()
            return nil
        }
        return (relation, root)
    }

    /// Delivers `change` (a dependency's own change, or its prior phase) to
    /// the user's relation as the key path's: the last link of a chain.
    private func forward(
        _ target: _DerivationStateMachine<_Relation>.Target, _ change: UnsafeRawPointer, _ phase: _Phase
    ) {
        guard let (relation, root) = load(target) else { return }
        if phase == .prior, !relation.options.contains(.prior) { return }
        guard let listener = relation.listener.load() else {
            relation.end()
            return
        }
        relation.deliver(listener, root, change, phase, 0)
    }

    /// The dependency on `channel` is about to change (its prior phase).
    /// `change` carries the property's old value; `isLeaf` says whether the
    /// dependency was made as the last link of a chain.
    func dependencyWillChange(on channel: ObjectIdentifier, change: UnsafeRawPointer, isLeaf: Bool) {
        switch state.withLock({ $0.willChange(channel: channel, forwards: isLeaf) }) {
        case .none:
            return
        case .forward(let target):
            forward(target, change, .prior)
        case .capture(let target, let chain):
            guard let (relation, root) = load(target) else { return }
            let old = chain.flatMap { chain in chain.withLeaf(from: root) { value(at: $0) } } ?? evaluate(root)
            let thread = _currentThreadID()
            let released = state.withLock { $0.captured(old, channel: channel, thread: thread) }
            _ = released  // released unlocked
            // Evaluating ran user code, which may have ended the relation.
            if relation.options.contains(.prior), let listener = listener(of: relation) {
                deliver(relation, to: listener, root: root, new: nil, old: old, isPrior: true)
            }
        }
    }

    /// The dependency on `channel` changed (after the store); see
    /// ``dependencyWillChange(on:change:isLeaf:)``.
    func dependencyDidChange(on channel: ObjectIdentifier, change: UnsafeRawPointer, isLeaf: Bool) {
        let thread = _currentThreadID()
        switch state.withLock({ $0.didChange(channel: channel, thread: thread, forwards: isLeaf) }) {
        case .none:
            return
        case .forward(let target):
            forward(target, change, .change)
        case .evaluate(let target, let old, let chain):
            guard let (relation, root) = load(target) else { return }
            refresh(relation: relation, root: root, old: old, chain: chain)
        }
    }

    /// The change of the dependency on `channel` announced in the prior phase
    /// was abandoned (its mutation threw): drops the old value captured for it.
    func priorPhaseAbandoned(on channel: ObjectIdentifier) {
        let thread = _currentThreadID()
        let old = state.withLock { $0.priorAbandoned(channel: channel, thread: thread) }
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
        guard let (relation, _) = state.withLock({ $0.target }).flatMap(load) else { return }
        let action = state.withLock { $0.dependencyTornDown(dependency) }
        if case .endRelation = action { relation.end() }
        _ = action  // released unlocked
    }

    /// Evaluates the key path while tracking what it reads (or, for a
    /// `chain` with a layout, reads its links from storage), re-binds, and
    /// delivers the new value.
    ///
    /// An evaluation that read no `@Observed` property leaves nothing that
    /// could change the value again: the value is delivered, then the
    /// relation ends.
    private func refresh(relation: _Relation, root: AnyObject, old: Any?, chain: _ChainLayout?) {
        if let walked = chain?.walk(from: root) {
            rebind(to: walked.accesses, root: root, options: relation.options, isKnownChain: true)
            guard let listener = listener(of: relation) else { return }
            // The last link's object is held by `walked` until this returns.
            withExtendedLifetime(walked) {
                deliver(relation, to: listener, root: root, newAt: walked.leaf, old: old)
            }
            return
        }
        evaluateTracked(root) { accesses, new in
            rebind(to: accesses, root: root, options: relation.options)
            guard let listener = listener(of: relation) else { return }
            deliver(relation, to: listener, root: root, newAt: new, old: old)
            if accesses.isEmpty { relation.end() }
        }
    }

    /// The listener of `relation`, if it is still active; ends it if its
    /// listener is gone.
    @inline(__always)
    private func listener(of relation: _Relation) -> AnyObject? {
        guard relation.isActive else { return nil }
        guard let listener = relation.listener.load() else {
            relation.end()
            return nil
        }
        return listener
    }
}

/// The typed half of a derivation, created in the caller's module by
/// `safeObserve` (where `Root` and `Value` are known).
@usableFromInline
// @unchecked Sendable: adds an immutable key path and two immutable closures that capture nothing mutable.
final class _TypedDerivation<Root: AnyObject, Value>: _Derivation, @unchecked Sendable {
    /// Builds the change a handler receives from values `evaluate` produced
    /// and passes a pointer to it to its last argument. Made where
    /// `safeObserve` was called, so that it is specialized there: built here,
    /// generically, the change cost a look-up of its type's metadata (and of
    /// `Optional<Value>`'s) on every delivery.
    ///
    /// The new value is either stored at `newAddress` (a chain's last link,
    /// or a value ``evaluateInto`` just read: then nothing is boxed or cast)
    /// or the evaluated `new`.
    @usableFromInline
    typealias MakeChange =
        (_ newAddress: UnsafeRawPointer?, _ new: Any?, _ old: Any?, _ body: (UnsafeRawPointer) -> Void) -> Void

    /// Reads `keyPath` (this derivation's, as an `AnyKeyPath`) on `root`,
    /// inside `track`, then calls `body` with the address of the value read.
    /// Built where `safeObserve` was called, so the read and the value are
    /// typed there: nothing is boxed or cast.
    @usableFromInline
    typealias EvaluateInto =
        (
            _ keyPath: AnyKeyPath, _ root: AnyObject, _ track: (_ read: () -> Void) -> Void,
            _ body: (UnsafeRawPointer) -> Void
        ) -> Void

    let keyPath: KeyPath<Root, Value>
    let makeChange: MakeChange
    let evaluateInto: EvaluateInto

    @usableFromInline
    init(keyPath: KeyPath<Root, Value>, makeChange: @escaping MakeChange, evaluateInto: @escaping EvaluateInto) {
        self.keyPath = keyPath
        self.makeChange = makeChange
        self.evaluateInto = evaluateInto
        super.init()
    }

    override var anyKeyPath: AnyKeyPath { keyPath }

    override var valueType: Any.Type { Value.self }

    override func value(at address: UnsafeRawPointer) -> Any {
        // A `Value` (the chain's layout checked its last link's type).
        address.load(as: Value.self)
    }

    override func evaluate(_ root: AnyObject) -> Any {
        // unsafeDowncast: the root of a derivation is always its key path's root.
        unsafeDowncast(root, to: Root.self)[keyPath: keyPath]
    }

    override func evaluateTracked(_ root: AnyObject, _ body: ([_Access], UnsafeRawPointer) -> Void) {
        // The pins are held until `body` has re-bound the dependencies (see
        // `_AccessTracker.pins`).
        var resolved: (accesses: [_Access], pins: [AnyObject]?) = ([], nil)
        evaluateInto(keyPath, root, { resolved = _AccessTracker.resolvePinning($0) }, { body(resolved.accesses, $0) })
        withExtendedLifetime(resolved) {}
    }

    override func deliver(
        _ relation: _Relation, to listener: AnyObject, root: AnyObject, new: Any?, old: Any?, isPrior: Bool
    ) {
        makeChange(nil, new, old) { relation.deliver(listener, root, $0, isPrior ? .prior : .change, 0) }
    }

    override func deliver(
        _ relation: _Relation, to listener: AnyObject, root: AnyObject, newAt newAddress: UnsafeRawPointer, old: Any?
    ) {
        makeChange(newAddress, nil, old) { relation.deliver(listener, root, $0, .change, 0) }
    }
}
