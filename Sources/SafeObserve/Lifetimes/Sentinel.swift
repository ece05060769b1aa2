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
///
/// Not final: a property of a class that also conforms to `Observable` has
/// an ``_ObservableSentinel``, which carries the Observation registrar the
/// property reports to.
@usableFromInline
// @unchecked Sendable: its one stored property is an immutable `Sendable`
// value (the subclass states its own).
class _Sentinel: @unchecked Sendable {
    @usableFromInline
    final let channel: _Channel

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
/// (``SafeObservation/relations(of:)-(SafeObservable)``) and the invariant checks need, kept in
/// SafeObserve's own state so that nothing ever reflects over an object.
///
/// A sentinel files its channel when it is created and removes it in its
/// `deinit`. The lock is a leaf: taken while the registry's lock may be held
/// (sentinels are created under it), it never takes another lock itself and
/// runs no user code.
///
/// An object's first ``State/inlineLimit`` channels sit in the address
/// table under the object's identity, in first-observation order (the table
/// keeps the order under a key); the later ones of an object with more (a
/// ``SafeObservationRegistrar``-backed subscript, one key path per
/// argument) go to an overflow list of their own, so that filing and
/// removing one costs O(1) whatever the number of the object's properties.
/// While an object has an overflow list, its new channels go there, so the
/// table's come first.
enum _SentinelIndex {
    struct Entry: _AddressKeyed {
        let tableKey: ObjectIdentifier
        let channel: _Channel
    }

    /// The channels of one object past the first ``State/inlineLimit``, in
    /// first-observation order; a removed one leaves a hole until compaction.
    struct Overflow {
        var channels: ContiguousArray<_Channel?> = []
        /// Where each channel sits in `channels`.
        var positions: [ObjectIdentifier: Int] = [:]

        var count: Int { positions.count }

        mutating func append(_ channel: _Channel) {
            positions[ObjectIdentifier(channel)] = channels.count
            channels.append(channel)
        }

        /// Removes `channel`; compacts once holes outnumber channels
        /// (amortized O(1)).
        mutating func remove(_ channel: _Channel) -> _Channel? {
            guard let position = positions.removeValue(forKey: ObjectIdentifier(channel)) else { return nil }
            let removed = channels[position]
            channels[position] = nil
            if channels.count >= 16, channels.count > 2 * positions.count {
                var kept = ContiguousArray<_Channel?>()
                kept.reserveCapacity(positions.count)
                for case let channel? in channels {
                    positions[ObjectIdentifier(channel)] = kept.count
                    kept.append(channel)
                }
                channels = kept
            }
            return removed
        }
    }

    struct State {
        /// The channels an object has in `table` before later ones go to
        /// its overflow list.
        static let inlineLimit = 8

        var table = _AddressTable<Entry>()
        var overflows: [ObjectIdentifier: Overflow] = [:]

        /// - Complexity: O(1) expected.
        mutating func insert(_ channel: _Channel) {
            let key = channel.objectID
            // (No hashing while no object has an overflow list: the usual case.)
            if !overflows.isEmpty, overflows[key] != nil {
                overflows[key]!.append(channel)
                return
            }
            var inline = 0
            table.forEach(under: key) { _ in
                inline += 1
                return inline < Self.inlineLimit
            }
            if inline < Self.inlineLimit {
                table.insert(Entry(tableKey: key, channel: channel))
            } else {
                overflows[key, default: Overflow()].append(channel)
            }
        }

        /// - Complexity: O(1) expected (amortized for an overflow list).
        mutating func remove(_ channel: _Channel) -> _Channel? {
            let key = channel.objectID
            if let entry = table.remove(under: key, where: { $0.channel === channel }) { return entry.channel }
            guard !overflows.isEmpty, let position = overflows.index(forKey: key) else { return nil }
            let removed = overflows.values[position].remove(channel)
            if overflows.values[position].count == 0 {
                overflows.remove(at: position)
                if overflows.isEmpty { overflows = [:] }  // give back what a peak took
            }
            return removed
        }

        /// The channels filed under `key`, in first-observation order.
        func channels(under key: ObjectIdentifier) -> [_Channel] {
            var channels: [_Channel] = []
            table.forEach(under: key) { entry in
                channels.append(entry.channel)
                return true
            }
            if !overflows.isEmpty, let overflow = overflows[key] {
                for case let channel? in overflow.channels { channels.append(channel) }
            }
            return channels
        }
    }

    private static let state = _Mutex(State())

    static func insert(_ channel: _Channel) {
        state.withLock { $0.insert(channel) }
    }

    static func remove(_ channel: _Channel) {
        let removed = state.withLock { $0.remove(channel) }
        _ = removed  // released unlocked
    }

    /// Every observed property's channel whose object is alive (the graph of
    /// ``SafeObservation/graph(of:)``).
    ///
    /// - Complexity: O(*n*) in the observed properties of the process.
    static func allChannels() -> [_Channel] {
        state.withLock { state in
            state.table.elements.map(\.channel) + state.overflows.values.flatMap { $0.channels.compactMap { $0 } }
        }.filter { !$0.object.isGone }
    }

    /// The channels of `object`'s observed properties, in the order they were
    /// first observed. A channel whose object died (its sentinel kept alive by
    /// a copy of the storage) is never `object`'s, even at a reused address.
    ///
    /// - Complexity: O(*p*) expected, *p* being the observed properties of `object`.
    static func channels(of object: AnyObject) -> [_Channel] {
        state.withLock { $0.channels(under: ObjectIdentifier(object)) }.filter { $0.object.refers(to: object) }
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
