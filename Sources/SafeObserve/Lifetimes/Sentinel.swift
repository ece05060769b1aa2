/// The deinit listener of one observed property of one object.
///
/// Created on the first observation of the property and stored next to its
/// value (in the `@Observed` storage, or in a ``SafeObservationRegistrar``),
/// a sentinel is held by nothing else: its `deinit` runs while its object is
/// being destroyed and tears down every relation on the property. Relations
/// hold the ``_Channel`` (the shared state), never the sentinel, so they cannot
/// delay that moment.
///
/// A copy of the storage (`Mirror(reflecting:).children` makes one) holds the
/// sentinel too and delays its `deinit` until the copy dies. The channel's
/// reference to its object (``_Channel/object``) lets everything that reports
/// or reuses relations tell that the object died meanwhile; see
/// ``_Relation/isLive``.
@usableFromInline final class _Sentinel: Sendable {
    @usableFromInline
    let channel: _Channel

    /// The sentinel of the property `keyPath` (as declared) of `object`.
    init(object: AnyObject, keyPath: AnyKeyPath) {
        channel = _Channel(object: object, keyPath: keyPath)
        _SentinelIndex.insert(channel)
    }

    deinit {
        _SentinelIndex.remove(channel)
        channel.tearDown()
    }
}

/// The channels of every observed property, by object: what introspection
/// (``SafeObservation/relations(of:)``) and the invariant checks need, kept in
/// SafeObserve's own state so that nothing ever reflects over an object.
///
/// A sentinel files its channel when it is created and removes it in its
/// `deinit`. The lock is a leaf: taken while the registry's lock may be held
/// (sentinels are created under it), it never takes another lock itself and
/// runs no user code.
enum _SentinelIndex {
    struct Entry: _AddressKeyed {
        let tableKey: ObjectIdentifier
        let channel: _Channel
    }

    private static let table = _Mutex(_AddressTable<Entry>())

    static func insert(_ channel: _Channel) {
        table.withLock { $0.insert(Entry(tableKey: channel.objectID, channel: channel)) }
    }

    static func remove(_ channel: _Channel) {
        let removed = table.withLock { $0.remove(under: channel.objectID) { $0.channel === channel } }
        _ = removed  // released unlocked
    }

    /// Every observed property's channel whose object is alive (the graph of
    /// ``SafeObservation/graph(of:)``).
    ///
    /// - Complexity: O(*n*) in the observed properties of the process.
    static func allChannels() -> [_Channel] {
        table.withLock { $0.elements.map(\.channel) }.filter { !$0.object.isGone }
    }

    /// The channels of `object`'s observed properties, in the order they were
    /// first observed. A channel whose object died (its sentinel kept alive by
    /// a copy of the storage) is never `object`'s, even at a reused address.
    ///
    /// - Complexity: O(*p*) expected, *p* being the observed properties of `object`.
    static func channels(of object: AnyObject) -> [_Channel] {
        var channels: [_Channel] = []
        table.withLock { table in
            table.forEach(under: ObjectIdentifier(object)) { entry in
                channels.append(entry.channel)
                return true
            }
        }
        return channels.filter { $0.object.refers(to: object) }
    }
}

/// Takes the lock that serializes every write of a sentinel field (the
/// ``_Registry``'s): registrations only read the object, so several may run
/// at once, but the first observation of a property writes its storage.
///
/// For the `@Observed` getter's tracking branch, which reads the sentinel
/// field (and creates the sentinel, `inout`, on the property's first
/// observation) with the storage's own accessors, and so cannot pass a
/// closure to a `withLock`: pair it with ``_unlockSentinelCreation()``, and
/// run no user code in between.
@usableFromInline
func _lockSentinelCreation() {
    _Registry.lock()
}

/// Releases the lock taken by ``_lockSentinelCreation()``.
@usableFromInline
func _unlockSentinelCreation() {
    _Registry.unlock()
}
