import Synchronization

#if SAFEOBSERVE_INTERNAL_CHECKS
    /// Registrations that resolved their key path by reading it (tests: the
    /// caches spare every later registration of an equal key path that).
    let _generalResolutions = Atomic<Int>(0)
#endif

/// What a registration produced.
@usableFromInline
struct _Registered {
    /// The relation registered, or the active one it duplicates; `nil` when
    /// the registration was refused (already reported).
    @usableFromInline let relation: _Relation?
    /// Whether the caller must deliver `.initial`.
    @usableFromInline let deliversInitial: Bool
    /// Whether `relation` was made by this registration (not a duplicate's).
    @usableFromInline let isNew: Bool

    @usableFromInline
    init(relation: _Relation?, deliversInitial: Bool, isNew: Bool = true) {
        self.relation = relation
        self.deliversInitial = deliversInitial
        self.isNew = isNew
    }
}

/// What `safeObserve` does once its generic parts are specialized away.
///
/// Not generic on purpose: the public entry point is `@inlinable` and builds
/// everything typed (the handler thunk, the key-path read, the `.initial`
/// delivery) in the caller's module; what remains runs with `AnyObject` and
/// `AnyKeyPath` and so never looks up generic metadata.
@usableFromInline
enum _SafeObserveRegistration {
    /// What `register`'s `typed` closure is asked to do.
    @usableFromInline
    enum _TypedStep {
        /// Read the key path (its result is discarded).
        case read
        /// Return a new ``_TypedDerivation`` for the key path.
        case makeDerivation
        /// Return the key path if it is settable (a
        /// `ReferenceWritableKeyPath`), `nil` otherwise.
        case checkSettable
    }

    /// Registers `listener` on `keyPath` of `object`.
    ///
    /// - Parameters:
    ///   - types: The root, value and listener types, for messages only.
    ///   - typed: The two steps that need the concrete types, in one closure
    ///     so the single-property path passes nothing for derived key paths:
    ///     `.read` reads `keyPath` on `object` (called with a tracker installed
    ///     unless the key path is known to be a single `@Observed` property,
    ///     see ``_AccessTracker``); `.makeDerivation` makes the typed
    ///     derivation a derived key path needs; `.checkSettable` tells a
    ///     settable key path (see ``isSubclassSpelling(of:_:_:)``).
    ///   - isDistinct: Whether the relation is never deduplicated with
    ///     another (a ``KeyValueObservation``'s: each call is its own
    ///     relation, as in KVO); it is filed under a key of its own.
    /// - Returns: The token, and whether the caller must deliver `.initial`
    ///   (a new, still active relation that asked for it).
    @usableFromInline
    static func register(
        _ object: AnyObject,
        keyPath: AnyKeyPath,
        listener: AnyObject,
        options: ObservationOptions,
        deliver: @escaping _Deliver,
        types: (root: Any.Type, value: Any.Type, listener: Any.Type),
        isDistinct: Bool = false,
        typed: (_TypedStep) -> AnyObject?
    ) -> (token: ObservationToken, deliversInitial: Bool) {
        let registered = registerRelation(
            object, keyPath: keyPath, listener: listener, options: options, deliver: deliver, types: types,
            isDistinct: isDistinct, typed: typed)
        guard let relation = registered.relation else { return (ObservationToken(inertWith: options), false) }
        return (ObservationToken(relation), registered.deliversInitial)
    }

    /// ``register(_:keyPath:listener:options:deliver:types:isDistinct:typed:)``
    /// returning the relation, not a token: what a ``KeyValueObservation``
    /// keeps is a reference to it, so a token would be built and dropped for
    /// nothing.
    ///
    /// - Returns: The relation registered, or the active one it duplicates
    ///   (`nil` if the registration was refused), and whether the caller must
    ///   deliver `.initial`.
    @usableFromInline
    @inline(__always)
    static func registerRelation(
        _ object: AnyObject,
        keyPath: AnyKeyPath,
        listener: AnyObject,
        options: ObservationOptions,
        deliver: @escaping _Deliver,
        types: (root: Any.Type, value: Any.Type, listener: Any.Type),
        isDistinct: Bool = false,
        typed: (_TypedStep) -> AnyObject?
    ) -> _Registered {
        let inert = _Registered(relation: nil, deliversInitial: false)
        if _swift_isDeallocating(object) {
            _Diagnostics.reportProgrammerError(
                "SafeObserve: cannot observe \(describe(keyPath, types)) on \(types.root) "
                    + "during the deinit of the \(types.root)")
            return inert
        }
        if _swift_isDeallocating(listener) {
            _Diagnostics.reportProgrammerError(
                "SafeObserve: cannot observe \(describe(keyPath, types)) on \(types.root) "
                    + "by a \(types.listener) during its own deinit")
            return inert
        }
        // `nil` only when the listener's proxy was retired meanwhile (its
        // relations had all ended, see `_ListenerProxy.retireIfEmpty()`):
        // then again, with a new proxy.
        while true {
            if let outcome = attempt(
                object, keyPath: keyPath, listener: listener, options: options, deliver: deliver, types: types,
                isDistinct: isDistinct, typed: typed)
            {
                return outcome
            }
        }
    }

    /// One attempt of ``register(_:keyPath:listener:options:deliver:types:typed:)``
    /// for a listener and an object that are not being destroyed; `nil` if
    /// the listener's proxy was retired meanwhile.
    @inline(__always)
    private static func attempt(
        _ object: AnyObject,
        keyPath: AnyKeyPath,
        listener: AnyObject,
        options: ObservationOptions,
        deliver: @escaping _Deliver,
        types: (root: Any.Type, value: Any.Type, listener: Any.Type),
        isDistinct: Bool,
        typed: (_TypedStep) -> AnyObject?
    ) -> _Registered? {
        let inert = _Registered(relation: nil, deliversInitial: false)
        // The common case first, exactly as if derived key paths did not
        // exist: a key path already known to be one @Observed property.
        if let found = _Registry.lookUp(keyPath, on: object, listener: listener) {
            return attach(
                object, keyPath, options, deliver, listener: listener, found: found, isDistinct: isDistinct)
        }

        if let found = registerEqualKeyPath(object, keyPath, listener, options, deliver, isDistinct) { return found }

        switch resolve(
            keyPath, on: object, types: types, read: { _ = typed(.read) }, isSettable: { typed(.checkSettable) != nil })
        {
        case .invalid:
            return inert

        case .property(let channel, let pins):
            guard let proxy = _ListenerProxy.of(listener, create: true) else { return inert }
            // Held until the relation is added (see `_AccessTracker.pins`).
            return withExtendedLifetime(pins) {
                attach(object, keyPath, options, deliver, to: channel, proxy: proxy, isDistinct: isDistinct)
            }

        case .derived(let accesses, let pins):
            // unsafeDowncast: `.makeDerivation` always returns a derivation.
            let derivation = unsafeDowncast(typed(.makeDerivation).unsafelyUnwrapped, to: _Derivation.self)
            // Held until the dependencies are added (see `_AccessTracker.pins`).
            return withExtendedLifetime(pins) {
                registerDerived(object, keyPath, listener, options, deliver, derivation, accesses, isDistinct)
            }
        }
    }

    /// Registers `listener` on `keyPath` of `object` if a key path equal to
    /// it was resolved before as one `@Observed` property (a literal in
    /// generic code is a new object on every call, so the identity cache
    /// misses it); `nil` otherwise, for the general path.
    @inline(never)
    private static func registerEqualKeyPath(
        _ object: AnyObject, _ keyPath: AnyKeyPath, _ listener: AnyObject, _ options: ObservationOptions,
        _ deliver: @escaping _Deliver, _ isDistinct: Bool
    ) -> _Registered?? {
        let objectClass = ObjectIdentifier(type(of: object))
        guard let field = _KeyPathResolutionCache.sentinelField(equalTo: keyPath, on: objectClass) else { return nil }
        let found = _Registry.withLock { $0.lookUp(field, on: object, listener: listener) }
        return .some(
            attach(object, keyPath, options, deliver, listener: listener, found: found, isDistinct: isDistinct))
    }

    /// ``attach(_:_:_:_:to:proxy:isDistinct:)`` after a registry look-up:
    /// finds the listener's proxy if the tables had none for it.
    @inline(__always)
    private static func attach(
        _ object: AnyObject, _ keyPath: AnyKeyPath, _ options: ObservationOptions, _ deliver: @escaping _Deliver,
        listener: AnyObject, found: consuming _Registry.Found, isDistinct: Bool
    ) -> _Registered? {
        guard let channel = found.channel.take(),
            let proxy = _ListenerProxy.of(listener, create: true, found: found)
        else {
            return _Registered(relation: nil, deliversInitial: false)
        }
        return attach(object, keyPath, options, deliver, to: channel, proxy: proxy, isDistinct: isDistinct)
    }

    /// Registers `listener` on a derived key path (kept out of line, so the
    /// single-property path above is laid out as if chains did not exist).
    @inline(never)
    private static func registerDerived(
        _ object: AnyObject, _ keyPath: AnyKeyPath, _ listener: AnyObject, _ options: ObservationOptions,
        _ deliver: @escaping _Deliver, _ derivation: _Derivation, _ accesses: [_Access], _ isDistinct: Bool
    ) -> _Registered? {
        guard let proxy = _ListenerProxy.of(listener, create: true) else {
            return _Registered(relation: nil, deliversInitial: false)
        }
        let candidate = _DerivedRelation(
            keyPath: keyPath, objectID: ObjectIdentifier(object), options: options, proxy: proxy,
            derivation: derivation, isDistinct: isDistinct, deliver: deliver)
        var existing: _Relation?
        guard proxy.insert(candidate, existing: &existing) else {
            return listenerIsAlive(listener) ? nil : _Registered(relation: nil, deliversInitial: false)
        }
        if let existing { return _Registered(relation: existing, deliversInitial: false) }
        derivation.start(relation: candidate, root: object, accesses: accesses)
        return _Registered(relation: candidate, deliversInitial: options.contains(.initial) && candidate.isActive)
    }

    /// Registers the listener of `proxy` on `channel` (a single `@Observed`
    /// property).
    private static func attach(
        _ object: AnyObject, _ keyPath: AnyKeyPath, _ options: ObservationOptions, _ deliver: @escaping _Deliver,
        to channel: consuming _Channel, proxy: consuming _ListenerProxy, isDistinct: Bool
    ) -> _Registered? {
        // Built before the proxy's lock is taken, and dropped on a dedupe hit.
        file(
            _Relation(
                keyPath: keyPath, objectID: ObjectIdentifier(object), options: options, proxy: proxy,
                channel: channel, isDistinct: isDistinct, deliver: deliver))
    }

    /// Files `relation`, just made for a single `@Observed` property, with
    /// its listener's proxy (or finds the active relation it duplicates) and
    /// its channel.
    @inline(__always)
    private static func file(_ relation: _Relation) -> _Registered? {
        var existing: _Relation?
        guard relation.proxy.insert(relation, existing: &existing) else {
            return listenerIsAlive(relation.listener.load()) ? nil : _Registered(relation: nil, deliversInitial: false)
        }
        if let existing { return _Registered(relation: existing, deliversInitial: false, isNew: false) }
        // Unwrapped: a relation made with a channel keeps it.
        guard relation.channel.unsafelyUnwrapped.add(relation) else {
            relation.end()
            return _Registered(relation: relation, deliversInitial: false)
        }
        return _Registered(
            relation: relation, deliversInitial: relation.options.contains(.initial) && relation.isActive)
    }

    /// Registers `listener` on `channel`: a key path of an `@Observable`
    /// model (see ``_ModelSentinel``), whose caller checked that neither
    /// side is being destroyed.
    static func register(
        _ object: AnyObject, keyPath: AnyKeyPath, listener: AnyObject, options: ObservationOptions,
        deliver: @escaping _Deliver, on channel: _Channel
    ) -> _Registered {
        // `nil` only when the listener's proxy was retired meanwhile: then
        // again, with a new proxy.
        while true {
            guard let proxy = _ListenerProxy.of(listener, create: true) else {
                return _Registered(relation: nil, deliversInitial: false)
            }
            if let registered = attach(object, keyPath, options, deliver, to: channel, proxy: proxy, isDistinct: false)
            {
                return registered
            }
        }
    }

    /// After a proxy refused a relation: whether that is because the proxy
    /// was retired (the listener lives on: retry) rather than torn down with
    /// its listener (then the registration is refused). Cold path.
    @inline(never)
    private static func listenerIsAlive(_ listener: AnyObject?) -> Bool {
        guard let listener else { return false }
        return !_swift_isDeallocating(listener)
    }

    /// What a key path reads.
    private enum Resolution {
        /// Nothing observable (already reported), or the object is in its `deinit`.
        case invalid
        /// Exactly one `@Observed` property of the root, and what to hold
        /// until the relation is added (see `_AccessTracker.pins`).
        case property(_Channel, pins: [AnyObject]?)
        /// A value derived from these `@Observed` properties, and what to
        /// hold until the dependencies are added.
        case derived([_Access], pins: [AnyObject]?)
    }

    /// Resolves `keyPath` by reading it with a tracker installed; `.invalid`
    /// after reporting a programmer error if it reads no `@Observed` property.
    private static func resolve(
        _ keyPath: AnyKeyPath, on object: AnyObject, types: (root: Any.Type, value: Any.Type, listener: Any.Type),
        read: () -> Void, isSettable: () -> Bool
    ) -> Resolution {
        #if SAFEOBSERVE_INTERNAL_CHECKS
            _generalResolutions.add(1, ordering: .relaxed)
        #endif
        let (accesses, pins) = _AccessTracker.resolvePinning(read)
        guard !accesses.isEmpty else {
            _Diagnostics.reportProgrammerError(
                "SafeObserve: cannot observe \(describe(keyPath, types)) on \(types.root): "
                    + "the key path reads no @Observed property (observe an @Observed property, or a key path "
                    + "or computed property that reads one)")
            return .invalid
        }
        guard let access = propertyAccess(accesses, keyPath, object, isSettable) else {
            return .derived(accesses, pins: pins)
        }
        if let field = access.sentinelField {
            _KeyPathResolutionCache.record(field, for: keyPath, on: ObjectIdentifier(type(of: object)))
        }
        _KeyPathNames.recordName(of: keyPath, reading: access)
        return .property(access.channel, pins: pins)
    }

    /// Whether `keyPath`, which read exactly the `@Observed` property
    /// `wrappedKeyPath` declares and nothing else, is that property spelled
    /// from a subclass: `\Sub.count` for `@Observed var count` declared in
    /// `Base` (the property's accessors always present `\Base.count`).
    ///
    /// Then both spellings are one stored property: one relation per listener,
    /// removed by either. A settable key path of the same value type, rooted
    /// at a strict subclass of the declaring class, is taken to be the
    /// property; so is a settable override of it, which is documented to
    /// deliver the stored value. A get-only computed property of the subclass
    /// that reads the property (`var doubled: Int { count * 2 }`) stays a
    /// derived key path, re-evaluated on each change.
    private static func isSubclassSpelling(
        of wrappedKeyPath: AnyKeyPath, _ keyPath: AnyKeyPath, _ isSettable: () -> Bool
    ) -> Bool {
        let declaring = type(of: wrappedKeyPath)
        let spelled = type(of: keyPath)
        guard spelled.valueType == declaring.valueType, spelled.rootType != declaring.rootType,
            let declaringClass = declaring.rootType as? AnyClass, var ancestor = spelled.rootType as? AnyClass
        else { return false }
        while let superclass = _getSuperclass(ancestor) {
            if superclass == declaringClass { return isSettable() }
            ancestor = superclass
        }
        return false
    }

    /// The channel of the `@Observed` property `keyPath` is on `object`, if
    /// `keyPath` is one (for removal by a key path spelled differently from
    /// the one registered). Reads the key path, with a tracker installed,
    /// unless a registration resolved it before.
    static func channel(of keyPath: AnyKeyPath, on object: AnyObject, read: () -> Void, isSettable: () -> Bool)
        -> _Channel?
    {
        let objectClass = ObjectIdentifier(type(of: object))
        if let field = _KeyPathResolutionCache.sentinelField(for: keyPath, on: objectClass)
            ?? _KeyPathResolutionCache.sentinelField(equalTo: keyPath, on: objectClass)
        {
            return field.channel(in: object)
        }
        return propertyAccess(_AccessTracker.resolve(read), keyPath, object, isSettable)?.channel
    }

    /// The access that makes `keyPath` exactly one `@Observed` property of
    /// `object`, if `accesses` (what reading it did) say it is: one access,
    /// on the object itself, to the property `keyPath` spells.
    private static func propertyAccess(
        _ accesses: [_Access], _ keyPath: AnyKeyPath, _ object: AnyObject, _ isSettable: () -> Bool
    ) -> _Access? {
        guard accesses.count == 1, let access = accesses.first, access.object === object,
            access.wrappedKeyPath == keyPath || isSubclassSpelling(of: access.wrappedKeyPath, keyPath, isSettable)
        else { return nil }
        return access
    }

    /// A readable name for `keyPath`, for messages.
    static func describe(_ keyPath: AnyKeyPath, _ types: (root: Any.Type, value: Any.Type, listener: Any.Type))
        -> String
    {
        let raw = _KeyPathNames.describe(keyPath)
        // Key paths through computed properties print as `<computed 0x… (T)>`;
        // keep the root and the value type, which is what identifies them.
        if raw.contains("<computed") {
            return "\\\(types.root).<property of type \(types.value)>"
        }
        return raw
    }
}
