/// The key paths a ``SafeObservationRegistrar`` has sentinels for, each
/// with its sentinel, found in O(1) expected whatever their number.
///
/// By identity first: a key-path literal of a property is one object per
/// use site, so the getter's and the setter's key path is found with no
/// hashing at all (an ``_AddressTable`` keyed by the stored key path's
/// identity). Otherwise by hash: a subscript's key path (`\.[index]`) is a
/// new object on every evaluation. Hashing a key path and comparing two may
/// run user code (its subscript arguments' `hash(into:)` and `==`), so the
/// caller computes the hash outside the lock, and compares only the key
/// paths with an equal hash, outside the lock too (``_KeyPathMatcher``).
///
/// Memory follows the live relations: the table forgets a key path nobody
/// observes any more (its sentinel then dies, and with it the channel) in
/// sweeps that the look-ups pay for, amortized. A sentinel is forgotten only
/// while this table holds its only reference: registrations and changes in
/// flight hold the sentinel (a registration from its tracked read, through
/// ``_Access/pin``, until its relation is added), so a sweep never tears
/// down a channel that a relation is being added to.
struct _RegistrarTable {
    struct Entry: _AddressKeyed {
        /// The key path as first observed, kept so that its identity stays
        /// unique while it is the key.
        let keyPath: AnyKeyPath
        let hash: Int
        /// The sentinel; this table's reference is the only lasting one.
        var sentinel: _Sentinel

        var tableKey: ObjectIdentifier { ObjectIdentifier(keyPath) }
    }

    private var entries = _AddressTable<Entry>()
    /// The identities of the stored key paths, by hash (usually one each).
    private var byHash: [Int: _Identities] = [:]
    /// Look-ups since the last sweep.
    private var lookUpsSinceSweep = 0
    /// The key paths the last sweep left.
    private var countAfterSweep = 0

    /// The key paths the table holds a sentinel for.
    var count: Int { entries.count }

    var isEmpty: Bool { entries.isEmpty }

    /// The sentinel of `keyPath` itself, by identity; runs no user code.
    ///
    /// - Complexity: O(1) expected.
    func sentinel(identicalTo keyPath: AnyKeyPath) -> _Sentinel? {
        entries.first(under: ObjectIdentifier(keyPath)) { $0.sentinel }
    }

    /// The sentinel of the first stored key path hashed `hash` that
    /// `isEqual` says equals the one looked up (`nil` from `isEqual`:
    /// unknown yet, skipped).
    ///
    /// - Complexity: O(1) expected: the key paths with an equal hash.
    func sentinel(hashed hash: Int, where isEqual: (AnyKeyPath) -> Bool?) -> _Sentinel? {
        var found: _Sentinel?
        byHash[hash]?.forEachIdentity { identity in
            found = entries.first(under: identity) { entry in isEqual(entry.keyPath) == true ? entry.sentinel : nil }
            return found == nil
        }
        return found
    }

    /// Stores `sentinel` for `keyPath` (not stored yet), hashed `hash`.
    ///
    /// - Complexity: Amortized O(1) expected.
    mutating func insert(_ keyPath: AnyKeyPath, hash: Int, sentinel: _Sentinel) {
        entries.insert(Entry(keyPath: keyPath, hash: hash, sentinel: sentinel))
        byHash[hash, default: _Identities()].insert(ObjectIdentifier(keyPath))
    }

    /// Counts a look-up, and once the look-ups since the last sweep reach
    /// twice the key paths that sweep left (32 at least), sweeps: returns
    /// the entries of the key paths nobody observes any more, removed, for
    /// the caller to release after unlocking (their sentinels' `deinit`
    /// takes other locks).
    ///
    /// So a key path nobody observes is forgotten within that many
    /// look-ups, and the table holds at most the key paths the last sweep
    /// left plus one per look-up since: about three times what the live
    /// relations need, at worst.
    ///
    /// Call it after taking a reference to the sentinel the look-up found,
    /// if any, so that the sweep cannot forget it.
    ///
    /// - Complexity: O(1) amortized: a sweep costs O(*k*) in the key paths
    ///   held, at most three per look-up since the last one.
    mutating func noteLookUp() -> [Entry] {
        lookUpsSinceSweep += 1
        guard lookUpsSinceSweep >= Swift.max(32, 2 * countAfterSweep) else { return [] }
        lookUpsSinceSweep = 0
        let removed = sweep()
        countAfterSweep = entries.count
        return removed
    }

    /// Removes the entries whose sentinel only this table holds and whose
    /// channel has no relation, and returns them.
    private mutating func sweep() -> [Entry] {
        let removed = entries.removeAll { entry in
            // Unique: no registration or change holds the sentinel, and none
            // can find it before the lock is released. The channel's lock
            // is a leaf, taken after the registrar's here and nowhere before.
            isKnownUniquelyReferenced(&entry.sentinel)
                && entry.sentinel.channel.state.withLock { $0.relations.isEmpty }
        }
        guard !removed.isEmpty else { return [] }
        for entry in removed {
            guard let position = byHash.index(forKey: entry.hash) else { continue }
            byHash.values[position].remove(ObjectIdentifier(entry.keyPath))
            if byHash.values[position].isEmpty { byHash.remove(at: position) }
        }
        // A dictionary keeps its capacity: after a peak, copy what is left.
        if byHash.isEmpty {
            byHash = [:]
        } else if byHash.capacity > 64, byHash.count * 8 < byHash.capacity {
            byHash = Dictionary(uniqueKeysWithValues: byHash.map { ($0.key, $0.value) })
        }
        return removed
    }
}

/// The identities of the key paths with one hash: usually one, inline.
struct _Identities {
    private var first: ObjectIdentifier?
    private var others: [ObjectIdentifier] = []

    var isEmpty: Bool { first == nil }

    mutating func insert(_ identity: ObjectIdentifier) {
        if first == nil { first = identity } else { others.append(identity) }
    }

    /// Removes `identity`; O(*n*) in the identities with this hash.
    mutating func remove(_ identity: ObjectIdentifier) {
        if first == identity {
            first = others.popLast()
        } else if let index = others.firstIndex(of: identity) {
            others.remove(at: index)
        }
    }

    /// Calls `body` with each identity until it returns `false`.
    func forEachIdentity(_ body: (ObjectIdentifier) -> Bool) {
        guard let first, body(first) else { return }
        for identity in others where !body(identity) { return }
    }
}
