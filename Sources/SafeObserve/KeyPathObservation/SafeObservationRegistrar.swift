import Synchronization

/// Makes properties observable that `@Observed` cannot wrap: custom setters,
/// values stored elsewhere, derived state you update by hand — the
/// counterpart of Key-Value Observing's `willChangeValue` / `didChangeValue`.
///
/// Keep one registrar as a stored `let` of the object (and nowhere else: its
/// lifetime tells SafeObserve when the object is gone). Report reads with
/// ``access(_:keyPath:)`` and writes with ``withMutation(of:keyPath:_:)``:
///
/// ```swift
/// final class Thermostat: SafeObservable {
///     let registrar = SafeObservationRegistrar()
///     private var storedCelsius = 20.0
///
///     var celsius: Double {
///         get {
///             registrar.access(self, keyPath: \.celsius)
///             return storedCelsius
///         }
///         set {
///             registrar.withMutation(of: self, keyPath: \.celsius) {
///                 storedCelsius = min(max(newValue, 5), 30)
///             }
///         }
///     }
/// }
///
/// thermostat.safeObserve(\.celsius, by: display) { display, _, change in
///     display.show(change.newValue!)
/// }
/// ```
///
/// When the property is observed, the new value is read through the key path
/// after the mutation, and the old value before it when some relation asks
/// for `.old`. Nothing is read while nobody observes the property.
///
/// Its cost and memory follow the key paths observed now, not those
/// observed before: a subscript whose every index was observed once
/// (`\.[index]`) costs a property nobody observes a lock and a look-up,
/// and the registrar forgets a key path once nobody observes it, as it is
/// used (in sweeps its look-ups pay for, amortized).
public final class SafeObservationRegistrar: Sendable {
    /// The sentinels of the key paths observed (and still observed, or
    /// not swept yet), by key-path identity and by hash; see
    /// ``_RegistrarTable``.
    private let table = _Mutex(_RegistrarTable())

    /// How many sentinels were made, counted under the table's lock: a
    /// mutation of an unobserved property compares it before and after (see
    /// ``withMutation(of:keyPath:_:)``).
    private let sentinelsMade = Atomic<UInt64>(0)

    /// Creates an empty registrar; nothing is allocated per property until
    /// the property is first observed.
    ///
    /// ```swift
    /// let registrar = SafeObservationRegistrar()
    /// ```
    public init() {}

    /// Reports a read of `keyPath`; call it in the property's getter.
    ///
    /// Costs one relaxed atomic load and a branch unless an observation is
    /// being registered on this thread.
    ///
    /// ```swift
    /// get {
    ///     registrar.access(self, keyPath: \.celsius)
    ///     return storedCelsius
    /// }
    /// ```
    @inlinable
    public func access<Object: SafeObservable, Value>(_ object: Object, keyPath: KeyPath<Object, Value>) {
        if _activeTrackers.load(ordering: .relaxed) != 0 {
            _recordAccess(object, keyPath: keyPath)
        }
    }

    /// Runs `mutation` and delivers the change of `keyPath` to its observers.
    ///
    /// Observers asking for `.prior` are called before `mutation`, the others
    /// after it. If `mutation` throws, the error propagates and no change is
    /// delivered (prior deliveries already made stay made).
    ///
    /// ```swift
    /// set {
    ///     registrar.withMutation(of: self, keyPath: \.celsius) { storedCelsius = newValue }
    /// }
    /// ```
    ///
    /// - Returns: What `mutation` returns.
    /// - Complexity: O(1) amortized when nobody observes `keyPath` (a lock
    ///   and a look-up by identity; for a key path that is not the object
    ///   first observed, such as a subscript's, its hash and a second look-up,
    ///   and two atomic counts), whatever was observed before; otherwise plus
    ///   one call per relation.
    public func withMutation<Object: SafeObservable, Value, Result>(
        of object: Object, keyPath: KeyPath<Object, Value>, _ mutation: () throws -> Result
    ) rethrows -> Result {
        // Counted from before the store until the change was delivered, so
        // that a registration's `.initial` read meanwhile knows it may have
        // seen this store (see `_MutationGauge`).
        let gauge = _MutationGauge.stripe(for: Unmanaged.passUnretained(object).toOpaque())
        gauge.begin()
        defer { gauge.end() }
        let made = sentinelsMade.load(ordering: .acquiring)
        guard let sentinel = sentinel(for: object, keyPath: keyPath, create: false) else {
            let result = try mutation()
            // A registration on another thread that made a sentinel
            // meanwhile may have read the property before this store: its
            // relations are told the change (with no old value: it was not
            // read before the store). Two loads when nothing was made.
            if _slowPath(sentinelsMade.load(ordering: .acquiring) != made),
                let sentinel = self.sentinel(for: object, keyPath: keyPath, create: false)
            {
                sentinel.channel.emitStoredChange(of: object, readNew: { object[keyPath: keyPath] })
            }
            return result
        }
        return try sentinel.channel.emitChange(
            of: object,
            readOld: { object[keyPath: keyPath] },
            mutate: mutation,
            readNew: { object[keyPath: keyPath] },
            readsNewInOrder: true
        )
    }

    @usableFromInline
    func _recordAccess<Object: SafeObservable, Value>(_ object: Object, keyPath: KeyPath<Object, Value>) {
        guard _AccessTracker.isActive, let sentinel = sentinel(for: object, keyPath: keyPath, create: true) else {
            return
        }
        // Pinned: the registration holds the sentinel until its relation is
        // added, so that no sweep forgets it meanwhile.
        _AccessTracker.record(_Access(object: object, channel: sentinel.channel), pinning: sentinel)
    }

    /// The key paths the registrar holds a sentinel for (tests).
    var _observedKeyPathCount: Int { table.withLock { $0.count } }

    /// The sentinel of `keyPath`, created on its first observation with `create`.
    ///
    /// By identity under the lock; then by hash (computed unlocked: it may
    /// run user code) and, for key paths with an equal hash, `==` unlocked,
    /// the lock taken again with the verdicts.
    ///
    /// - Complexity: O(1) amortized expected, whatever the key paths
    ///   observed so far; no user code unless `keyPath` is not a stored key
    ///   path by identity.
    private func sentinel(for object: AnyObject, keyPath: AnyKeyPath, create: Bool) -> _Sentinel? {
        var hash: Int?
        var matcher = _KeyPathMatcher()
        var candidate: _Sentinel?
        while true {
            var swept: [_RegistrarTable.Entry] = []
            let step = table.withLock { table -> _LookUpStep in
                var found = table.sentinel(identicalTo: keyPath)
                if found == nil {
                    guard !table.isEmpty || candidate != nil || create else { return .absent }
                    guard let hash else { return .needsHash }
                    found = table.sentinel(hashed: hash) { matcher.matches($0, keyPath) }
                    if found == nil, matcher.needsComparison { return .needsComparison }
                    if found == nil, let candidate {
                        table.insert(keyPath, hash: hash, sentinel: candidate)
                        sentinelsMade.wrappingAdd(1, ordering: .releasing)
                        found = candidate
                    }
                }
                // After `found` holds its sentinel: a sweep cannot forget it.
                swept = table.noteLookUp()
                return found.map(_LookUpStep.found) ?? .absent
            }
            _ = swept  // released unlocked: a sentinel's deinit takes other locks
            switch step {
            case .found(let sentinel):
                return sentinel
            case .needsHash:
                hash = keyPath.hashValue
            case .needsComparison:
                matcher.compareQueued(with: keyPath)
            case .absent:
                // Never create a sentinel inside the object's own deinit.
                guard create, candidate == nil, !_swift_isDeallocating(object) else { return nil }
                candidate = _Sentinel(object: object, keyPath: keyPath)
            }
        }
    }
}

/// What one look-up of ``SafeObservationRegistrar`` under its lock found.
private enum _LookUpStep {
    case found(_Sentinel)
    /// Not found by identity: the key path's hash is needed (unlocked).
    case needsHash
    /// Key paths with an equal hash need `==` (unlocked).
    case needsComparison
    /// Not stored (and no candidate to store).
    case absent
}
