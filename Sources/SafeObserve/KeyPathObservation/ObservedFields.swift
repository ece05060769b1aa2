@_spi(Reflection) import Swift

/// The `@Observed` stored properties of a class, as its type metadata
/// describes them: declared name and where each keeps its sentinel.
///
/// SafeObserve never reads an object's stored properties other than the
/// `@Observed` storage a key path leads to, so it never reflects over
/// instances (`Mirror` would read every field: a dead `unowned` one traps, an
/// `unowned(unsafe)` one is a use-after-free, a concurrent write to an
/// unrelated field races, and a custom mirror runs user code). Metadata is
/// immutable and describes every instance of the class alike, superclass
/// fields included.
///
/// Used where a layout fact is needed once per class or per key path: to
/// validate the sentinel offset that registration caches (``_SentinelField``)
/// to name key paths in descriptions (``_KeyPathNames``), and to read the
/// links of a chain (``_ChainLayout``). The answers are
/// cached per class (classes are finitely many; metadata is never freed).
enum _ObservedFields {
    struct Field: Sendable {
        /// The property's declared name: `count` for `@Observed var count`.
        let name: String
        /// The byte offset of its `_sentinel` field from the object's start.
        let sentinelOffset: Int
        /// The byte offset of its `_value` field from the object's start.
        let valueOffset: Int
        /// The property's declared type (`Value` of its `Observed<Value>`).
        let valueType: Any.Type
        /// The property's storage type (`Observed<Value>`), which makes its
        /// sentinels.
        let storageType: any _ObservedStorage.Type
        /// Whether the class reports its `@Observed` properties to
        /// Observation (it also conforms to `Observable`): then its
        /// sentinels are ``_ObservableSentinel``s, as its getters make them.
        let reportsToObservation: Bool
    }

    private static let cache = _Mutex([ObjectIdentifier: [Field]]())

    /// The `@Observed` properties of `type` and its superclasses.
    ///
    /// - Complexity: O(1) expected once `type` was seen; O(*p*) in its stored
    ///   properties the first time. Runs no user code.
    static func fields(of type: AnyClass) -> [Field] {
        let id = ObjectIdentifier(type)
        if let known = cache.withLock({ $0[id] }) { return known }
        var fields: [Field] = []
        // The conformance's witness, as the getters see it (a subclass
        // inherits its superclass's).
        let reportsToObservation = (type as? any SafeObservable.Type)?._reportsToObservation ?? false
        // `classType` (1 << 0): offsets from the object's start; superclass
        // fields included. (The option is a `static var` of the standard
        // library, so its raw value is spelled here.)
        _ = _forEachField(of: type, options: _EachFieldOptions(rawValue: 1 << 0)) { name, offset, fieldType, _ in
            if let storage = fieldType as? any _ObservedStorage.Type {
                var label = String(cString: name)
                // `@Observed var count` is stored as `_count`.
                if label.hasPrefix("_") { label.removeFirst() }
                fields.append(
                    Field(
                        name: label, sentinelOffset: offset + storage._sentinelOffset,
                        valueOffset: offset + storage._valueOffset, valueType: storage._valueType,
                        storageType: storage, reportsToObservation: reportsToObservation))
            }
            return true
        }
        cache.withLock { $0[id] = fields }
        return fields
    }

    /// Where `object` keeps the sentinel whose channel is `channel`: the
    /// offset of one of its `@Observed` fields (`nil` if none holds it, as
    /// for a ``SafeObservationRegistrar``'s property). Reads the sentinel
    /// fields alone, under the lock their writes take; `object` must be
    /// held by the caller.
    ///
    /// - Complexity: O(*p*) in the `@Observed` properties of `object`'s class.
    static func sentinelOffset(of channel: _Channel, in object: AnyObject) -> Int? {
        let fields = fields(of: type(of: object))
        // Unmanaged without a retain: the caller holds `object`.
        let base = UnsafeRawPointer(Unmanaged.passUnretained(object).toOpaque())
        return _Registry.withLock { _ in
            fields.first { field in
                // A stored `_Sentinel?`, borrowed (see `Observed._sentinel`).
                guard let address = UnsafeRawPointer(bitPattern: (base + field.sentinelOffset).load(as: UInt.self))
                else { return false }
                return Unmanaged<_Sentinel>.fromOpaque(address)._withUnsafeGuaranteedRef { $0.channel === channel }
            }?.sentinelOffset
        }
    }

    /// The `@Observed` property of `type` whose sentinel lies `offset` bytes
    /// into its instances, if there is one.
    static func field(withSentinelAt offset: Int, in type: AnyClass) -> Field? {
        fields(of: type).first { $0.sentinelOffset == offset }
    }
}

/// `Observed<Value>` seen without its `Value` (metadata queries only).
protocol _ObservedStorage: SendableMetatype {
    /// Where `_sentinel` sits inside the storage.
    static var _sentinelOffset: Int { get }
    /// Where `_value` sits inside the storage.
    static var _valueOffset: Int { get }
    /// `Value`.
    static var _valueType: Any.Type { get }
    /// A new sentinel for a property of `object` with this storage: an
    /// ``_ObservableSentinel`` if its class reports to Observation.
    static func _makeSentinel(of object: AnyObject, keyPath: AnyKeyPath, reportingToObservation: Bool) -> _Sentinel
}
