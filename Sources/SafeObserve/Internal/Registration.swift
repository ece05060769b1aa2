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
    ///     the first time a key path is seen (see ``_AccessTracker``).
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
        read: () -> Void
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

        guard let channel = channel(of: keyPath, on: object, types: types, read: read),
            let proxy = _ListenerProxy.of(listener, create: true)
        else { return inert }

        // Built before the proxy's lock is taken, and dropped on a dedupe hit.
        let candidate = _Relation(
            keyPath: keyPath, objectID: ObjectIdentifier(object), listener: listener, options: options,
            proxy: proxy, channel: channel, deliver: deliver)
        guard let (relation, inserted) = proxy.insert(candidate) else { return inert }
        let token = ObservationToken(relation)
        guard inserted else { return (token, false) }
        guard channel.add(relation) else {
            relation.end()
            return (token, false)
        }
        return (token, options.contains(.initial) && relation.isActive)
    }

    /// The channel of the single `@Observed` property `keyPath` is, or `nil`
    /// (after reporting a programmer error if the key path is not one).
    private static func channel(
        of keyPath: AnyKeyPath, on object: AnyObject, types: (root: Any.Type, value: Any.Type, listener: Any.Type),
        read: () -> Void
    ) -> _Channel? {
        if let field = _KeyPathResolutionCache.sentinelField(for: keyPath) {
            // Seen before: exactly one @Observed property of this class.
            return field.channel(in: object)
        }
        let accesses = _AccessTracker.resolve(read)
        guard accesses.count == 1, let access = accesses.first, access.object === object,
            access.wrappedKeyPath == keyPath
        else {
            let reason =
                accesses.isEmpty
                ? "the key path reads no @Observed property"
                : "the key path is not a single @Observed property declared on \(types.root) "
                    + "(dotted, optional, computed and subclass-rooted key paths are not supported yet)"
            _Diagnostics.reportProgrammerError(
                "SafeObserve: cannot observe \(describe(keyPath, types)) on \(types.root): \(reason)")
            return nil
        }
        if let field = access.sentinelField {
            _KeyPathResolutionCache.record(field, for: keyPath)
        }
        return access.channel
    }

    /// A readable name for `keyPath`, for messages.
    static func describe(_ keyPath: AnyKeyPath, _ types: (root: Any.Type, value: Any.Type, listener: Any.Type))
        -> String
    {
        let raw = String(describing: keyPath)
        // Key paths through computed properties print as `<computed 0x… (T)>`;
        // keep the root and the value type, which is what identifies them.
        if raw.contains("<computed") {
            return "\\\(types.root).<property of type \(types.value)>"
        }
        return raw
    }
}
