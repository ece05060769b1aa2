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
        _ListenerProxy.of(listener, create: false)?.activeRelations().map(ObservationToken.init) ?? []
    }

    /// The active relations on `object`, property by property, in
    /// registration order — derived key paths rooted at `object`
    /// (`\.account.balance`, `\.fullName`) included when they read one of
    /// its `@Observed` properties, each listed once, with the first of those
    /// properties it currently depends on.
    ///
    /// Relations of a dead listener stay listed until they are cleaned up;
    /// ``ObservationToken/listener`` is `nil` for those.
    ///
    /// ```swift
    /// print(SafeObservation.relations(of: counter).map(\.debugDescription))
    /// ```
    ///
    /// - Complexity: O(*p* + *n*): it reflects over the object's *p* stored
    ///   properties. Meant for debugging and tests, not hot paths.
    public static func relations(of object: some SafeObservable) -> [ObservationToken] {
        let channels = _channels(of: object)
        // A derived key path rooted here (`\.account.balance`) is listed
        // through its dependency on one of this object's properties.
        var listed = Set<ObjectIdentifier>()
        var relations: [_Relation] = []
        for relation in channels.flatMap({ $0.liveRelations() }) {
            var listedRelation: _Relation? = relation
            if relation.isDependency {
                // unsafeDowncast: a dependency's listener is always its derivation.
                listedRelation = relation.listener.load().flatMap {
                    unsafeDowncast($0, to: _Derivation.self).relation(rootedAt: object)
                }
            }
            if let listedRelation, listed.insert(ObjectIdentifier(listedRelation)).inserted {
                relations.append(listedRelation)
            }
        }
        return relations.map(ObservationToken.init)
    }

    /// The channels of `object`'s properties observed so far (reflection).
    static func _channels(of object: some SafeObservable) -> [_Channel] {
        _observedStorage(of: object).compactMap(\.channel)
    }

    /// The stored name (`_count`) of the property whose channel is `channel`.
    static func _storageLabel(of channel: _Channel, in object: AnyObject) -> String? {
        _observedStorage(of: object).first { $0.channel === channel }?.label
    }

    /// Every `@Observed` storage of `object` (and of a registrar, without a
    /// label), with its channel if observed so far.
    private static func _observedStorage(of object: AnyObject) -> [(label: String?, channel: _Channel?)] {
        var mirrors: [Mirror] = []
        var mirror: Mirror? = Mirror(reflecting: object)  // a custom mirror is user code: unlocked
        while let current = mirror {
            mirrors.append(current)
            mirror = current.superclassMirror
        }
        // Reading the stored fields races with a first observation writing a
        // sentinel field, so read them under the lock that write is made
        // under. The values read (strong copies of every stored property) are
        // dropped after unlocking: releasing one may run a user deinit. A
        // custom mirror's children are user code, so they are read unlocked.
        let children: [Mirror.Child]
        if object is any CustomReflectable {
            children = mirrors.flatMap { Array($0.children) }
        } else {
            children = _Registry.withLock { _ in mirrors.flatMap { Array($0.children) } }
        }
        var storage: [(label: String?, channel: _Channel?)] = []
        for child in children {
            if let observed = child.value as? any _ObservedStorage {
                storage.append((child.label, observed._channelForIntrospection))
            } else if let registrar = child.value as? SafeObservationRegistrar {
                storage += registrar.channels().map { (nil, $0) }
            }
        }
        return storage
    }
}

/// Storage that may hold a property's channel (introspection only).
protocol _ObservedStorage {
    var _channelForIntrospection: _Channel? { get }
}
