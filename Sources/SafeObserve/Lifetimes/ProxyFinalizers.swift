/// The finalizers of listener proxies (see ``_ListenerProxy/addFinalizer(_:)``),
/// by proxy: only proxies that have some are filed. The lock is a leaf:
/// taken under a proxy's lock, it takes no other and runs no user code.
enum _ProxyFinalizers {
    private struct Table {
        /// Each proxy's actions by identity. Identities increase, so their
        /// order is the order the actions were added.
        var actions: [ObjectIdentifier: [Int: @Sendable () -> Void]] = [:]
        var lastID = 0
    }

    private static let table = _Mutex(Table())

    /// Files `action` for `proxy`; returns its identity.
    ///
    /// - Complexity: Amortized O(1) expected.
    static func add(_ action: @escaping @Sendable () -> Void, to proxy: _ListenerProxy) -> Int {
        table.withLock { table in
            table.lastID += 1
            table.actions[ObjectIdentifier(proxy), default: [:]][table.lastID] = action
            return table.lastID
        }
    }

    /// Removes the action `id` of `proxy` (to release unlocked), and says
    /// how many remain.
    ///
    /// - Complexity: O(1) expected: the proxy's actions are changed in place.
    static func remove(_ id: Int, of proxy: _ListenerProxy) -> (removed: (@Sendable () -> Void)?, remaining: Int) {
        table.withLock { table in
            let key = ObjectIdentifier(proxy)
            guard let removed = table.actions[key]?.removeValue(forKey: id) else {
                return (nil, table.actions[key]?.count ?? 0)
            }
            let remaining = table.actions[key]?.count ?? 0
            if remaining == 0 { table.actions[key] = nil }
            return (removed, remaining)
        }
    }

    /// Takes every action of `proxy` (its final teardown), in the order
    /// they were added.
    ///
    /// - Complexity: O(*f* log *f*) in the proxy's actions.
    static func takeAll(of proxy: _ListenerProxy) -> [@Sendable () -> Void] {
        let actions = table.withLock { $0.actions.removeValue(forKey: ObjectIdentifier(proxy)) } ?? [:]
        return actions.sorted { $0.key < $1.key }.map(\.value)
    }

    /// How many actions `proxy` has (tests).
    static func count(of proxy: _ListenerProxy) -> Int {
        table.withLock { $0.actions[ObjectIdentifier(proxy)]?.count ?? 0 }
    }
}
