/// Readable names for the key paths of `@Observed` properties.
///
/// An `@Observed` property is computed (the wrapper's accessors), so its key
/// path prints as `\Counter.<computed 0x… (Int)>`. The first registration of
/// such a key path (the slow path, which already read it with a tracker)
/// finds the property's declared name in its class's metadata — the stored `_count`
/// whose sentinel it read — and descriptions print `\Counter.count`. The
/// property's accessors are untouched, so reads and writes pay nothing.
/// Bounded: past 4,096 key paths (a program building key paths dynamically),
/// new ones keep their standard description.
///
/// Not named: a key path formed through a protocol requirement (`\T.count`
/// in code generic over a protocol declaring `count`). Its one component is
/// the requirement's accessor, not the property's, so it is not equal to the
/// property's key path and is observed as a derived key path; nothing in it
/// names the requirement (the standard description's own symbol look-up
/// finds none), and naming it after the one property it read would name a
/// forwarding computed property wrongly. `KeyPathNamesTests` pins it.
enum _KeyPathNames {
    private static let limit = 4_096

    /// Names by key-path identity (the key path is held, so the identity
    /// stays valid).
    private static let table = _Mutex([ObjectIdentifier: (keyPath: AnyKeyPath, name: String)]())

    /// Records the name of the property `access` read, for `keyPath`, from
    /// the type metadata of the object's class (never from the object).
    static func recordName(of keyPath: AnyKeyPath, reading access: _Access) {
        let id = ObjectIdentifier(keyPath)
        guard table.withLock({ $0[id] == nil && $0.count < limit }),
            let offset = access.sentinelFieldOffset,
            let field = _ObservedFields.field(withSentinelAt: offset, in: type(of: access.object))
        else { return }
        table.withLock { table in
            if table[id] == nil, table.count < limit { table[id] = (keyPath, field.name) }
        }
    }

    /// `keyPath` as source: `\Counter.count` for a recorded `@Observed`
    /// property, the standard description otherwise.
    static func describe(_ keyPath: AnyKeyPath) -> String {
        let raw = String(describing: keyPath)
        guard raw.contains("<computed") else { return raw }
        if let name = table.withLock({ $0[ObjectIdentifier(keyPath)]?.name }) {
            return "\\\(type(of: keyPath).rootType).\(name)"
        }
        // Another object equal to a resolved key path (a literal at another
        // use site, or in generic code): its field names it.
        guard let root = type(of: keyPath).rootType as? AnyClass,
            let field = _KeyPathResolutionCache.sentinelField(equalTo: keyPath, on: nil),
            let name = _ObservedFields.field(withSentinelAt: field.offset, in: root)?.name
        else { return raw }
        return "\\\(root).\(name)"
    }
}
