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
public final class SafeObservationRegistrar: Sendable {
    /// The sentinels of the key paths observed so far, in first-observation
    /// order. A list, not a dictionary: hashing a key path may run user code
    /// (its subscript arguments' `hash(into:)`), which must never run under
    /// the lock; see `_KeyPathMatcher`.
    private let sentinels = _Mutex<[(keyPath: AnyKeyPath, sentinel: _Sentinel)]>([])

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
    /// - Complexity: O(1) when nobody observes `keyPath` (a lock and a lookup);
    ///   otherwise plus one call per relation.
    public func withMutation<Object: SafeObservable, Value, Result>(
        of object: Object, keyPath: KeyPath<Object, Value>, _ mutation: () throws -> Result
    ) rethrows -> Result {
        guard let sentinel = sentinel(for: object, keyPath: keyPath, create: false) else {
            return try mutation()
        }
        return try sentinel.channel.emitChange(
            of: object,
            readOld: { object[keyPath: keyPath] },
            mutate: mutation,
            readNew: { object[keyPath: keyPath] }
        )
    }

    @usableFromInline
    func _recordAccess<Object: SafeObservable, Value>(_ object: Object, keyPath: KeyPath<Object, Value>) {
        guard _AccessTracker.isActive, let sentinel = sentinel(for: object, keyPath: keyPath, create: true) else {
            return
        }
        _AccessTracker.record(_Access(object: object, channel: sentinel.channel))
    }

    /// The sentinel of `keyPath`, created on its first observation with `create`.
    ///
    /// - Complexity: O(*k*) in the key paths observed so far, with no user
    ///   code unless `keyPath` is not one of them by identity.
    private func sentinel(for object: AnyObject, keyPath: AnyKeyPath, create: Bool) -> _Sentinel? {
        var matcher = _KeyPathMatcher()
        var candidate: _Sentinel?
        while true {
            // Identity under the lock; `==` unlocked, then again with the verdicts.
            let (found, retry) = sentinels.withLock { sentinels -> (_Sentinel?, Bool) in
                if let found = sentinels.first(where: { matcher.matches($0.keyPath, keyPath) == true }) {
                    return (found.sentinel, false)
                }
                if matcher.needsComparison { return (nil, true) }
                guard let candidate else { return (nil, false) }
                sentinels.append((keyPath, candidate))
                return (candidate, false)
            }
            if let found { return found }
            if retry {
                matcher.compareQueued(with: keyPath)
                continue
            }
            // Never create a sentinel inside the object's own deinit.
            guard create, candidate == nil, !_swift_isDeallocating(object) else { return nil }
            candidate = _Sentinel(object: object, keyPath: keyPath)
        }
    }
}
