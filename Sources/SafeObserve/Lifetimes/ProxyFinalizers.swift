/// The finalizers of listener proxies (see ``_ListenerProxy/addFinalizer(_:)``),
/// by proxy: only proxies that have some are filed. The lock is a leaf:
/// taken under a proxy's lock, it takes no other and runs no user code.
enum _ProxyFinalizers {
    private struct Table {
        var actions: [ObjectIdentifier: [(id: Int, action: @Sendable () -> Void)]] = [:]
        var lastID = 0
    }

    private static let table = _Mutex(Table())

    /// Files `action` for `proxy`; returns its identity.
    static func add(_ action: @escaping @Sendable () -> Void, to proxy: _ListenerProxy) -> Int {
        table.withLock { table in
            table.lastID += 1
            table.actions[ObjectIdentifier(proxy), default: []].append((table.lastID, action))
            return table.lastID
        }
    }

    /// Removes the action `id` of `proxy` (to release unlocked), and says
    /// how many remain.
    static func remove(_ id: Int, of proxy: _ListenerProxy) -> (removed: (@Sendable () -> Void)?, remaining: Int) {
        table.withLock { table in
            let key = ObjectIdentifier(proxy)
            guard var actions = table.actions[key], let index = actions.firstIndex(where: { $0.id == id }) else {
                return (nil, table.actions[key]?.count ?? 0)
            }
            let removed = actions.remove(at: index).action
            table.actions[key] = actions.isEmpty ? nil : actions
            return (removed, actions.count)
        }
    }

    /// Takes every action of `proxy` (its final teardown), in order.
    static func takeAll(of proxy: _ListenerProxy) -> [@Sendable () -> Void] {
        table.withLock { $0.actions.removeValue(forKey: ObjectIdentifier(proxy)) ?? [] }.map(\.action)
    }

    /// How many actions `proxy` has (tests).
    static func count(of proxy: _ListenerProxy) -> Int {
        table.withLock { $0.actions[ObjectIdentifier(proxy)]?.count ?? 0 }
    }
}
