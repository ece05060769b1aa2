/// What `safeObserve` does once its generic parts are specialized away.
///
/// Not generic on purpose: the public entry point is `@inlinable` and builds
/// everything typed (the handler thunk, the key-path read, the `.initial`
/// delivery) in the caller's module; what remains runs with `AnyObject` and
/// `AnyKeyPath` and so never looks up generic metadata.
@usableFromInline
enum _SafeObserveRegistration {
    /// Registers `listener` on `keyPath` of `object`.
    ///
    /// - Parameters:
    ///   - types: The root, value and listener types, for messages only.
    ///   - read: Reads `keyPath` on `object`; called with a tracker installed
    ///     unless the key path is known to be a single `@Observed` property
    ///     (see ``_AccessTracker``).
    ///   - derive: Makes the typed derivation a derived key path needs.
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
        read: () -> Void,
        derive: () -> _Derivation
    ) -> (token: ObservationToken, deliversInitial: Bool) {
        var inert: (ObservationToken, Bool) { (ObservationToken(inertWith: options), false) }
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

        // The common case first, exactly as if derived key paths did not
        // exist: a key path already known to be one @Observed property.
        if let field = _KeyPathResolutionCache.sentinelField(for: keyPath) {
            guard let channel = field.channel(in: object) else { return inert }
            return attach(object, keyPath, listener, options, deliver, to: channel)
        }

        switch resolve(keyPath, on: object, types: types, read: read) {
        case .invalid:
            return inert

        case .property(let channel):
            return attach(object, keyPath, listener, options, deliver, to: channel)

        case .derived(let accesses):
            guard let proxy = _ListenerProxy.of(listener, create: true) else { return inert }
            let derivation = derive()
            let candidate = _DerivedRelation(
                keyPath: keyPath, objectID: ObjectIdentifier(object), options: options, proxy: proxy,
                derivation: derivation, deliver: deliver)
            guard let (relation, inserted) = proxy.insert(candidate) else { return inert }
            let token = ObservationToken(relation)
            guard inserted else { return (token, false) }
            derivation.start(relation: relation, root: object, accesses: accesses)
            return (token, options.contains(.initial) && relation.isActive)
        }
    }

    /// Registers `listener` on `channel` (a single `@Observed` property).
    private static func attach(
        _ object: AnyObject, _ keyPath: AnyKeyPath, _ listener: AnyObject, _ options: ObservationOptions,
        _ deliver: @escaping _Deliver, to channel: _Channel
    ) -> (token: ObservationToken, deliversInitial: Bool) {
        guard let proxy = _ListenerProxy.of(listener, create: true) else {
            return (ObservationToken(inertWith: options), false)
        }
        // Built before the proxy's lock is taken, and dropped on a dedupe hit.
        let candidate = _Relation(
            keyPath: keyPath, objectID: ObjectIdentifier(object), options: options, proxy: proxy,
            channel: channel, deliver: deliver)
        guard let (relation, inserted) = proxy.insert(candidate) else {
            return (ObservationToken(inertWith: options), false)
        }
        let token = ObservationToken(relation)
        guard inserted else { return (token, false) }
        guard channel.add(relation) else {
            relation.end()
            return (token, false)
        }
        return (token, options.contains(.initial) && relation.isActive)
    }

    /// What a key path reads.
    private enum Resolution {
        /// Nothing observable (already reported), or the object is in its `deinit`.
        case invalid
        /// Exactly one `@Observed` property of the root.
        case property(_Channel)
        /// A value derived from these `@Observed` properties.
        case derived([_Access])
    }

    /// Resolves `keyPath` by reading it with a tracker installed; `.invalid`
    /// after reporting a programmer error if it reads no `@Observed` property.
    private static func resolve(
        _ keyPath: AnyKeyPath, on object: AnyObject, types: (root: Any.Type, value: Any.Type, listener: Any.Type),
        read: () -> Void
    ) -> Resolution {
        let accesses = _AccessTracker.resolve(read)
        guard !accesses.isEmpty else {
            _Diagnostics.reportProgrammerError(
                "SafeObserve: cannot observe \(describe(keyPath, types)) on \(types.root): "
                    + "the key path reads no @Observed property (observe an @Observed property, or a key path "
                    + "or computed property that reads one)")
            return .invalid
        }
        guard accesses.count == 1, let access = accesses.first, access.object === object,
            access.wrappedKeyPath == keyPath
        else {
            return .derived(accesses)
        }
        if let field = access.sentinelField {
            _KeyPathResolutionCache.record(field, for: keyPath)
        }
        _KeyPathNames.recordName(of: keyPath, reading: access)
        return .property(access.channel)
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
