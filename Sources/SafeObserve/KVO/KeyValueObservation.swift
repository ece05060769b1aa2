/// An observation that lasts as long as you keep it: the counterpart of
/// Foundation's `NSKeyValueObservation`, returned by
/// ``SafeObservable/observe(_:options:isolation:changeHandler:)``.
///
/// ```swift
/// final class CounterView {
///     var observation: KeyValueObservation?
///
///     func show(_ counter: Counter) {
///         observation = counter.observe(\.count, options: [.initial, .new]) { counter, change in
///             print("count is now \(change.newValue!)")
///         }
///     }
/// }
/// // `observation = nil` (or `invalidate()`) stops observing, as with KVO.
/// ```
///
/// The relation ends when the observation is deinitialized or invalidated,
/// and, as for every SafeObserve relation, when the observed object dies;
/// any order of these is safe, and nothing is ever called after the
/// relation ended. The observation never keeps the object alive.
///
/// - Note: Introspection (``SafeObservation/relations(of:)-(SafeObservable)``,
///   ``SafeObservation/graph(of:)``) lists each observation's relation with
///   one internal listener that every observation shares, not with the
///   observation; end an observation through it, never through that
///   listener.
public final class KeyValueObservation: Sendable {
    /// The relation, never retained (`nil` if the registration was refused):
    /// the observation keeps neither the relation nor its handler alive, only
    /// the relation's allocation, for `handle`.
    private let relation: _RelationReference?
    /// What the relation is loaded through (see ``_UnretainedHandle``).
    private let handle: _UnretainedHandle?

    @usableFromInline init(_ relation: _Relation?) {
        let reference = relation.map(_RelationReference.init)
        self.relation = reference
        handle = reference.map { _UnretainedHandle($0.reference) }
    }

    /// An observation of the relation `token` refers to.
    @usableFromInline init(_ token: ObservationToken) {
        relation = token._relation
        handle = token._relation.map { _UnretainedHandle($0.reference) }
    }

    /// The relation unless its deinitialization began.
    @inline(__always)
    private func load() -> _Relation? {
        // unsafeDowncast: `handle` is made from the relation's reference.
        handle?.load().map { unsafeDowncast($0, to: _Relation.self) }
    }

    deinit {
        load()?.end()
    }

    /// Stops observing: the handler never runs again and is released.
    /// Idempotent.
    ///
    /// ```swift
    /// observation.invalidate()
    /// ```
    public func invalidate() {
        load()?.end()
    }

    /// Whether the handler still runs: `false` once the observation was
    /// invalidated or the observed object died.
    ///
    /// ```swift
    /// assert(!observation.isActive)   // after invalidate()
    /// ```
    public var isActive: Bool { load()?.isLive ?? false }
}

extension SafeObservable {
    /// Observes `keyPath` for as long as the returned observation is kept,
    /// with KVO's shape: `object.observe(\.count, options: [.new]) { object, change in … }`.
    ///
    /// ```swift
    /// observation = counter.observe(\.count, options: [.old, .new]) { counter, change in
    ///     print("\(change.oldValue!) -> \(change.newValue!)")
    /// }
    /// ```
    ///
    /// Migrating Swift KVO code means changing `NSObject` to
    /// ``SafeObservable`` and `@objc dynamic` to ``Observed``; code that spells
    /// the observation's type changes `NSKeyValueObservation` to
    /// ``KeyValueObservation``. As in KVO, the default options are `[]`: the
    /// change carries no values unless `.new` or `.old` is asked for.
    ///
    /// `keyPath` may be a single `@Observed` property, a dotted or optional
    /// chain through them, or a computed property that reads them (see
    /// "Derived key paths"). The handler runs where `isolation` says, as for
    /// ``safeObserve(_:by:options:isolation:changeHandler:)``.
    ///
    /// - Parameters:
    ///   - keyPath: What to observe.
    ///   - options: What each change carries; `[]` by default, as in KVO.
    ///   - isolation: The actor the handler is isolated to (the caller's by
    ///     default), or `nil` for synchronous delivery on any thread.
    ///   - changeHandler: Called with the object and the change.
    /// - Returns: The observation; the relation ends when it is deinitialized
    ///   or invalidated.
    /// - Complexity: Amortized O(1) for a single `@Observed` property: one
    ///   relation, as for a token-based registration, plus the observation
    ///   object. A derived key path costs what
    ///   ``safeObserve(_:by:options:isolation:changeHandler:)`` costs for it.
    @inlinable
    public func observe<Value>(
        _ keyPath: KeyPath<Self, Value>,
        options: ObservationOptions = [],
        isolation: isolated (any Actor)? = #isolation,
        changeHandler: @escaping (Self, ObservedChange<Value>) -> Void
    ) -> KeyValueObservation {
        // One listener for every observation, so that an observation costs
        // one relation and one allocation, not a listener of its own; its
        // relation is distinct, so two observations of one key path stay two
        // relations, as in KVO.
        let listener = _KeyValueObservationListener.shared
        guard isolation == nil else {
            return KeyValueObservation(
                _safeObserve(keyPath, by: listener, options: options, isolation: isolation, isDistinct: true) {
                    _, object, change in
                    changeHandler(object, change)
                })
        }
        let registered = _registerRelation(
            keyPath, by: listener, listenerType: KeyValueObservation.self, options: options,
            deliver: _makeDeliver(options, unisolatedObjectHandler: changeHandler), isDistinct: true)
        let observation = KeyValueObservation(registered.relation)
        if registered.deliversInitial {
            let current = self[keyPath: keyPath]
            // Reading ran user code (a computed property), which may have invalidated it.
            if observation.isActive {
                changeHandler(self, ObservedChange(newValue: current, oldValue: nil, isInitial: true))
            }
        }
        return observation
    }
}

/// The listener of every ``KeyValueObservation``'s relation. It never dies,
/// so a relation ends only when its observation is invalidated or
/// deinitialized (which both end the relation) or its object dies.
///
/// A plain listener, not a ``SafeObserver``: its proxy is found in the
/// registry's table in the same look-up as the observed property's channel,
/// without reading an `observerLifetime`.
@usableFromInline
final class _KeyValueObservationListener: Sendable {
    @usableFromInline static let shared = _KeyValueObservationListener()
    private init() {}
}
