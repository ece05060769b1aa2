import Synchronization

/// Makes a stored property of a ``SafeObservable`` class observable.
///
/// ```swift
/// final class Counter: SafeObservable {
///     @Observed var count = 0
/// }
///
/// counter.safeObserve(\.count, by: label) { label, _, change in
///     label.text = "\(change.newValue!)"
/// }
/// counter.count += 1   // the handler runs now, on this thread, after the store
/// ```
///
/// Setting a property that nobody observes costs one branch more than a plain
/// stored property. The bookkeeping for observers (a sentinel) is created on
/// the property's first observation and dies with the object.
///
/// Mutating in place (`inbox.messages.append(m)`, `title += "!"`, a
/// `mutating` method) is one change, delivered after the mutation, and never
/// copies the value unless a relation asks for `.old`:
///
/// ```swift
/// inbox.messages.append(message)   // O(1); observers get one change
/// ```
///
/// `@Observed` works only inside classes that conform to ``SafeObservable``;
/// elsewhere it does not compile.
///
/// - Note: Registering an observation reads the property, so it needs the
///   same synchronization as any other read of it. Everything else —
///   handlers, unobserving, tokens, either side dying — may happen on any
///   thread.
@propertyWrapper
public struct Observed<Value> {
    @usableFromInline
    var _value: Value

    /// Created by the first observation; held by nothing else, so it dies
    /// with the object and tears the property's relations down.
    ///
    /// Unmanaged, borrowed: once set it is never replaced or cleared, so
    /// code holding the enclosing object may read this field's bits and use
    /// the sentinel without retaining it (the setter, `_modify`, the
    /// registry's look-up).
    @usableFromInline
    var _sentinel: _Sentinel?

    /// Creates the storage with its initial value.
    ///
    /// ```swift
    /// @Observed var title = "Untitled"
    /// ```
    @inlinable
    public init(wrappedValue: Value) {
        _value = wrappedValue
        _sentinel = nil
    }

    /// Not available: `@Observed` needs its enclosing ``SafeObservable`` instance.
    ///
    /// ```swift
    /// struct Settings { @Observed var volume = 1 }   // error: use SafeObservable
    /// ```
    @available(
        *, unavailable,
        message: "@Observed can only be applied to properties of classes that conform to SafeObservable"
    )
    public var wrappedValue: Value {
        get { fatalError("@Observed requires an enclosing SafeObservable instance") }
        set { fatalError("@Observed requires an enclosing SafeObservable instance") }
    }

    /// Reads and writes the property through its enclosing instance.
    ///
    /// You do not call this: Swift does, for every `@Observed` property of a
    /// ``SafeObservable`` class.
    ///
    /// ```swift
    /// counter.count = 3   // calls this subscript's setter
    /// ```
    ///
    /// - Complexity: O(1) when nobody observes the property; otherwise one lock
    ///   plus one call per relation on it.
    @inlinable
    public static subscript<EnclosingSelf: SafeObservable>(
        _enclosingInstance instance: EnclosingSelf,
        wrapped wrappedKeyPath: ReferenceWritableKeyPath<EnclosingSelf, Value>,
        storage storageKeyPath: ReferenceWritableKeyPath<EnclosingSelf, Observed<Value>>
    ) -> Value {
        @inline(__always) get {
            // Folded away unless the class also conforms to `Observable`.
            if EnclosingSelf._reportsToObservation {
                if _activeTrackers.load(ordering: .relaxed) == 0,
                    let value = _readReported(instance, storageKeyPath)
                {
                    return value
                }
                return _readObserved(instance, wrappedKeyPath, storageKeyPath)
            }
            if _activeTrackers.load(ordering: .relaxed) != 0 {
                return _readObserved(instance, wrappedKeyPath, storageKeyPath)
            }
            return instance[keyPath: storageKeyPath]._value
        }
        @inline(__always) set {
            // Borrowed (see `_sentinel`): `instance` is held for this call.
            let sentinelBits = unsafeBitCast(instance[keyPath: storageKeyPath]._sentinel, to: UInt.self)
            guard let sentinelAddress = UnsafeRawPointer(bitPattern: sentinelBits) else {
                instance[keyPath: storageKeyPath]._value = newValue
                return
            }
            // Observation is told around the whole change, as by an
            // `@Observable` class's setter (folded away unless the class
            // also conforms to `Observable`).
            let reports =
                EnclosingSelf._reportsToObservation
                && _reportsChange(of: instance, to: newValue, storageKeyPath, sentinelBits: sentinelBits)
            if reports { _report(.willSet, of: instance, sentinelBits: sentinelBits) }
            Unmanaged<_Sentinel>.fromOpaque(sentinelAddress)._withUnsafeGuaranteedRef { sentinel in
                // A property read (its sentinel carries its registrar) but
                // never observed here has nothing to emit: no relation was
                // ever added, so no lock is taken. (Folded away unless the
                // class also conforms to `Observable`.)
                if EnclosingSelf._reportsToObservation, sentinel.channel.additions.load(ordering: .relaxed) == 0 {
                    instance[keyPath: storageKeyPath]._value = newValue
                    return
                }
                sentinel.channel.emitChange(
                    of: instance,
                    readOld: { instance[keyPath: storageKeyPath]._value },
                    mutate: { instance[keyPath: storageKeyPath]._value = newValue },
                    readNew: { newValue }
                )
            }
            if reports { _report(.didSet, of: instance, sentinelBits: sentinelBits) }
        }
        // In-place mutation (`items.append(x)`, `text += "!"`, `count += 1`):
        // the value is yielded where it is stored, never copied, so a
        // collection mutated in place stays uniquely referenced. Observed,
        // the old value is copied only when a relation asks for `.old`,
        // exactly as in the setter.
        @inline(__always) _modify {
            // Borrowed, as in the setter. One yield only (the
            // optimizer inlines single-yield accessors, and only inlined do
            // the key paths fold to field accesses); the observed side is
            // out of line, and every read of the value stays here.
            // As an `@Observable` class's `_modify`: a read, then the change
            // reported around the access (folded away unless the class
            // also conforms to `Observable`). Declared first, the `defer`
            // runs last, once the change was delivered.
            var sentinelBits = unsafeBitCast(instance[keyPath: storageKeyPath]._sentinel, to: UInt.self)
            if EnclosingSelf._reportsToObservation {
                if sentinelBits == 0 {
                    // The property's first read, as in the getter.
                    _lockSentinelCreation()
                    sentinelBits = unsafeBitCast(instance[keyPath: storageKeyPath]._sentinel, to: UInt.self)
                    if sentinelBits == 0 {
                        sentinelBits = _createSentinel(
                            of: instance, reporting: true, recordingInto: nil, { wrappedKeyPath },
                            in: &instance[keyPath: storageKeyPath]._sentinel)
                    }
                    _unlockSentinelCreation()
                }
                _reportAccess(of: instance, sentinelBits: sentinelBits)
            }
            let reports = EnclosingSelf._reportsToObservation && sentinelBits != 0
            if reports { _report(.willSet, of: instance, sentinelBits: sentinelBits) }
            defer { if reports { _report(.didSet, of: instance, sentinelBits: sentinelBits) } }
            let emission = sentinelBits == 0 ? nil : _beginInPlaceChange(of: instance, sentinelBits: sentinelBits)
            var old: Value? = emission?.needsOld == true ? instance[keyPath: storageKeyPath]._value : nil
            if let emission, emission.hasPrior {
                _deliverPrior(emission, of: instance, old: old, sentinelBits: sentinelBits)
                // A prior handler may have changed the property: the change
                // starts from the value stored now.
                if emission.needsOld { old = instance[keyPath: storageKeyPath]._value }
            }
            // After the access ends, so handlers may read the property. An
            // abandoned access resumes only this `defer`.
            var didMutate = false
            defer {
                if let emission {
                    let new: Value? = didMutate ? instance[keyPath: storageKeyPath]._value : nil
                    if _endInPlaceChange(emission, of: instance, sentinelBits: sentinelBits, new: new, old: old) {
                        // A prior handler made this change: the enclosing
                        // change is announced again, from the value now.
                        let current: Value? = emission.needsOld ? instance[keyPath: storageKeyPath]._value : nil
                        _renewPrior(of: instance, sentinelBits: sentinelBits, old: current)
                    }
                }
            }
            yield &instance[keyPath: storageKeyPath]._value
            didMutate = true
        }
    }

    /// The getter's fast path for a class that reports to Observation: the
    /// value, its read reported, once the property has its sentinel (`nil`
    /// before its first read). Both fields are read in one access (one
    /// exclusivity check); copying the value runs no user code, and the
    /// sentinel is borrowed (see `_sentinel`): `instance` is held for the
    /// call.
    @inlinable @inline(__always)
    static func _readReported<EnclosingSelf: SafeObservable>(
        _ instance: EnclosingSelf, _ storageKeyPath: ReferenceWritableKeyPath<EnclosingSelf, Observed<Value>>
    ) -> Value? {
        let value = instance[keyPath: storageKeyPath]._value
        let sentinelBits = unsafeBitCast(instance[keyPath: storageKeyPath]._sentinel, to: UInt.self)
        guard sentinelBits != 0 else { return nil }
        _reportAccess(of: instance, sentinelBits: sentinelBits)
        return value
    }

    /// The getter off its fast path: the property's first read (if the
    /// class reports to Observation), or registration resolving a key path
    /// on some thread (this thread's, if any, records the property).
    @inlinable @inline(__always)
    static func _readObserved<EnclosingSelf: SafeObservable>(
        _ instance: EnclosingSelf,
        _ wrappedKeyPath: ReferenceWritableKeyPath<EnclosingSelf, Value>,
        _ storageKeyPath: ReferenceWritableKeyPath<EnclosingSelf, Observed<Value>>
    ) -> Value {
        let tracker = _activeTrackers.load(ordering: .relaxed) != 0 ? _trackerOnThisThread() : nil
        if tracker == nil {
            guard EnclosingSelf._reportsToObservation else { return instance[keyPath: storageKeyPath]._value }
            // Reporting, and not recording: the getter's fast path, which
            // registration elsewhere diverted here.
            if let value = _readReported(instance, storageKeyPath) { return value }
        }
        // Registrations only read the object, so several may run at once,
        // on several threads: the sentinel field is only touched under this
        // lock, and only read — a modify access would conflict with the
        // other threads' reads — unless this is the property's first
        // observation. No user code runs under it.
        _lockSentinelCreation()
        // Both fields in one access, as in the getter.
        let value = instance[keyPath: storageKeyPath]._value
        var sentinelBits = unsafeBitCast(instance[keyPath: storageKeyPath]._sentinel, to: UInt.self)
        if sentinelBits == 0 {
            // The declared key path is formed only inside this closure, the
            // accessor's one use of it: passed as a value, or captured by a
            // closure that also captures what the optimizer cannot fold, it
            // was formed (and released) on every read, observed or not.
            sentinelBits = _createSentinel(
                of: instance, reporting: EnclosingSelf._reportsToObservation, recordingInto: tracker,
                { wrappedKeyPath }, in: &instance[keyPath: storageKeyPath]._sentinel)
        } else if let tracker {
            _recordAccess(instance, sentinelBits: sentinelBits, into: tracker)
        }
        _unlockSentinelCreation()
        if EnclosingSelf._reportsToObservation { _reportAccess(of: instance, sentinelBits: sentinelBits) }
        return value
    }

    /// `_modify` of an observed property, before the value is yielded: the
    /// emission (`nil` if nobody listens). Out of line, like the two below,
    /// so that the accessor stays small enough to inline.
    @usableFromInline @inline(never)
    static func _beginInPlaceChange(of instance: some SafeObservable, sentinelBits: UInt) -> _Channel.Emission? {
        Unmanaged<_Sentinel>.fromOpaque(UnsafeRawPointer(bitPattern: sentinelBits).unsafelyUnwrapped)
            ._withUnsafeGuaranteedRef { $0.channel.beginEmission(on: instance) }
    }

    /// Delivers the prior phase of an in-place change.
    @usableFromInline @inline(never)
    static func _deliverPrior(
        _ emission: _Channel.Emission, of instance: some SafeObservable, old: Value?, sentinelBits: UInt
    ) {
        Unmanaged<_Sentinel>.fromOpaque(UnsafeRawPointer(bitPattern: sentinelBits).unsafelyUnwrapped)
            ._withUnsafeGuaranteedRef { emission.deliverPrior(root: instance, old: old, channel: $0.channel) }
    }

    /// `_modify` of an observed property, after the access ended: delivers
    /// the change (`new` is `nil` when the access was abandoned: then
    /// derivations learn that no change follows the prior phase) and ends the
    /// emission.
    /// Returns whether the change was made in the prior phase of another
    /// change of the property (then the caller renews that phase with
    /// ``_renewPrior(of:sentinelBits:old:)``).
    @usableFromInline @inline(never)
    static func _endInPlaceChange(
        _ emission: _Channel.Emission, of instance: some SafeObservable, sentinelBits: UInt, new: Value?, old: Value?
    ) -> Bool {
        guard let new else {
            if emission.hasPrior { emission.abandonPriorPhase(root: instance) }
            return false
        }
        let channel = Unmanaged<_Sentinel>.fromOpaque(UnsafeRawPointer(bitPattern: sentinelBits).unsafelyUnwrapped)
            .takeUnretainedValue().channel
        emission.deliverChange(root: instance, new: new, old: old, channel: channel)
        return emission.hasPrior && _Channel.Emission.enclosingPriorPhase(channel: channel) != nil
    }

    /// Announces again the change in whose prior phase an in-place change
    /// was made (see ``_Channel/Emission/renewPrior(_:root:old:channel:)``).
    @usableFromInline @inline(never)
    static func _renewPrior(of instance: some SafeObservable, sentinelBits: UInt, old: Value?) {
        let channel = Unmanaged<_Sentinel>.fromOpaque(UnsafeRawPointer(bitPattern: sentinelBits).unsafelyUnwrapped)
            .takeUnretainedValue().channel
        // Found again: the prior phase is still in flight (this thread runs
        // inside it), and nothing ran since the check but the value's read.
        guard let record = _Channel.Emission.enclosingPriorPhase(channel: channel) else { return }
        _Channel.Emission.renewPrior(record, root: instance, old: old, channel: channel)
    }

    /// Registration is resolving a key path on this thread, with `tracker`:
    /// record this property, whose sentinel exists (`sentinelBits`, borrowed).
    ///
    /// Called under `_lockSentinelCreation()`; runs no user code.
    @usableFromInline
    static func _recordAccess(_ instance: AnyObject, sentinelBits: UInt, into tracker: UnsafeMutableRawPointer) {
        // Unwrapped: the caller checked the bits are not zero.
        Unmanaged<_Sentinel>.fromOpaque(UnsafeRawPointer(bitPattern: sentinelBits).unsafelyUnwrapped)
            ._withUnsafeGuaranteedRef { sentinel in
                _AccessTracker.record(_Access(object: instance, channel: sentinel.channel), into: tracker)
            }
    }

    /// Creates the property's sentinel in `sentinel` (`nil`: the caller
    /// looked) on its first observation: an ``_ObservableSentinel`` if the
    /// class reports to Observation (`reporting`), whose channel keeps the
    /// key path `wrappedKeyPath` forms (the property's, as declared); and
    /// records the property into `tracker`, if any. Nothing inside the
    /// object's own `deinit`. Returns the field's bits.
    ///
    /// Called under `_lockSentinelCreation()`, which serializes every write
    /// of a sentinel field; runs no user code.
    @usableFromInline @inline(never)
    static func _createSentinel(
        of instance: AnyObject, reporting: Bool, recordingInto tracker: UnsafeMutableRawPointer?,
        _ wrappedKeyPath: () -> AnyKeyPath, in sentinel: inout _Sentinel?
    ) -> UInt {
        guard !_swift_isDeallocating(instance) else { return 0 }
        let created =
            reporting
            ? _ObservableSentinel(object: instance, keyPath: wrappedKeyPath(), sameness: _sameness())
            : _Sentinel(object: instance, keyPath: wrappedKeyPath())
        sentinel = created
        if let tracker {
            // Where the field is, validated later only if registration
            // caches it.
            let base = UnsafeRawPointer(Unmanaged.passUnretained(instance).toOpaque())
            let offset = withUnsafeMutablePointer(to: &sentinel) { UnsafeRawPointer($0) - base }
            _AccessTracker.record(
                _Access(object: instance, channel: created.channel, knownSentinelFieldOffset: offset),
                into: tracker)
        }
        // Borrowed: the field holds it.
        return UInt(bitPattern: Unmanaged.passUnretained(created).toOpaque())
    }
}

extension Observed: _ObservedStorage {
    static var _sentinelOffset: Int {
        // Unwrapped: `_sentinel` is a stored property, so it has an offset.
        MemoryLayout<Self>.offset(of: \Self._sentinel).unsafelyUnwrapped
    }
    static var _valueOffset: Int {
        // Unwrapped: `_value` is a stored property, so it has an offset.
        MemoryLayout<Self>.offset(of: \Self._value).unsafelyUnwrapped
    }
    static var _valueType: Any.Type { Value.self }
    static func _makeSentinel(of object: AnyObject, keyPath: AnyKeyPath, reportingToObservation: Bool) -> _Sentinel {
        reportingToObservation
            ? _ObservableSentinel(object: object, keyPath: keyPath, sameness: _sameness())
            : _Sentinel(object: object, keyPath: keyPath)
    }
}
