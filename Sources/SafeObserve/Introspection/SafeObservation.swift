import Observation

/// Operations on relations that are not tied to one observed object:
/// ending all of a listener's relations, and introspection for debugging and
/// leak tests.
///
/// ```swift
/// SafeObservation.removeAll(observedBy: viewModel)
/// #expect(SafeObservation.relations(of: counter).isEmpty)
/// ```
public enum SafeObservation {
    /// Ends every relation `listener` holds, on every object.
    ///
    /// Idempotent; safe inside handlers and inside the listener's `deinit`.
    ///
    /// ```swift
    /// SafeObservation.removeAll(observedBy: self)
    /// ```
    ///
    /// - Complexity: O(*n*) in the listener's relations.
    public static func removeAll(observedBy listener: AnyObject) {
        _ListenerProxy.of(listener, create: false)?.removeAll(final: false)
    }

    /// The active relations `listener` holds, on every object.
    ///
    /// ```swift
    /// for token in SafeObservation.relations(observedBy: label) { print(token) }
    /// ```
    ///
    /// - Complexity: O(*n*) in the listener's relations.
    public static func relations(observedBy listener: AnyObject) -> [ObservationToken] {
        let relations = _ListenerProxy.of(listener, create: false)?.activeRelations() ?? []
        return relations.filter(\.isLive).map(ObservationToken.init)
    }

    /// The active relations on `object`, property by property, in the order
    /// the properties were first observed, and each property's relations in
    /// registration order — derived key paths rooted at `object`
    /// (`\.account.balance`, `\.fullName`) included when they read one of
    /// its `@Observed` properties, each listed once, with the first of those
    /// properties it currently depends on. (A ``SafeObservationRegistrar``
    /// forgets a key path nobody observes any more; observed again, it
    /// counts as first observed then.)
    ///
    /// Relations of a dead listener stay listed until they are cleaned up;
    /// ``ObservationToken/listener`` is `nil` for those.
    ///
    /// Reads only SafeObserve's own bookkeeping, never `object`'s stored
    /// properties: it is safe for any class, whatever its other fields hold
    /// (dead `unowned` references included), runs no custom mirror, and may
    /// run while other threads write `object`'s other properties.
    ///
    /// ```swift
    /// print(SafeObservation.relations(of: counter).map(\.debugDescription))
    /// ```
    ///
    /// - Complexity: O(*p* + *n*) in the observed properties of `object` and
    ///   their relations. Meant for debugging and tests, not hot paths.
    public static func relations(of object: some SafeObservable) -> [ObservationToken] {
        _relations(of: object)
    }

    /// The active relations on the `@Observable` model `object`, key path by
    /// key path, in the order the key paths were first observed, and each
    /// key path's relations in registration order.
    ///
    /// Relations of a dead listener stay listed until they are cleaned up;
    /// ``ObservationToken/listener`` is `nil` for those.
    ///
    /// ```swift
    /// #expect(SafeObservation.relations(of: store).isEmpty)
    /// ```
    ///
    /// - Complexity: O(*p* + *n*) in the observed key paths of `object` and
    ///   their relations. Meant for debugging and tests, not hot paths.
    public static func relations(of object: some Observable & AnyObject) -> [ObservationToken] {
        _relations(of: object)
    }

    /// The active relations on `object`, a model that is both
    /// ``SafeObservable`` and `Observable` (see
    /// ``relations(of:)-(SafeObservable)``).
    ///
    /// ```swift
    /// print(SafeObservation.relations(of: model))
    /// ```
    ///
    /// - Complexity: O(*p* + *n*) in the observed properties of `object` and
    ///   their relations.
    public static func relations(of object: some SafeObservable & Observable) -> [ObservationToken] {
        _relations(of: object)
    }

    static func _relations(of object: AnyObject) -> [ObservationToken] {
        // A derived key path rooted here (`\.account.balance`) is listed
        // through its dependency on one of this object's properties.
        var listed = Set<ObjectIdentifier>()
        var relations: [_Relation] = []
        for relation in _channels(of: object).flatMap({ $0.liveRelations() }) {
            var listedRelation: _Relation? = relation
            if relation.isDependency {
                listedRelation = (relation.listener.load() as? _Derivation)?.relation(rootedAt: object)
            }
            if let listedRelation, listed.insert(ObjectIdentifier(listedRelation)).inserted {
                relations.append(listedRelation)
            }
        }
        return relations.map(ObservationToken.init)
    }

    /// The channels of `object`'s properties observed so far.
    static func _channels(of object: AnyObject) -> [_Channel] {
        _SentinelIndex.channels(of: object)
    }
}
