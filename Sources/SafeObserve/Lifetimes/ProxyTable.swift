/// Proxies of listeners that do not adopt ``SafeObserver`` (part of the
/// ``_Registry``).
///
/// Such a listener cannot be given a `deinit` hook on Linux, so its proxy is
/// kept here; the proxy's reference to the listener tells whether it is
/// alive. Each new entry inspects two old ones (round-robin) and tears down
/// those whose listener died, so dead entries never outnumber live ones by
/// more than a constant factor, with O(1) work per registration.
struct _ProxyTable {
    struct Entry: Sendable, _AddressKeyed {
        /// The listener's identity when it registered.
        let id: ObjectIdentifier
        /// The listener's proxy. Its reference to the listener (never
        /// retained) tells whether the listener is alive; on Linux it also
        /// keeps the listener's allocation, so its address is not reused
        /// meanwhile.
        let proxy: _ListenerProxy

        var tableKey: ObjectIdentifier { id }
    }

    private var entries = _AddressTable<Entry>()
    /// Round-robin position of the sweep, a slot of `entries`.
    private var sweepCursor = 0

    /// The proxy of `listener`, if it has one.
    ///
    /// An entry at the listener's address is this listener's unless the
    /// platform can reuse a dead listener's address before its entry is swept
    /// (the portable probes: a weak reference does not keep the allocation).
    /// Such an entry is never returned (with `create`, ``insertProxy(for:)``
    /// replaces it).
    ///
    /// - Complexity: O(1) expected.
    func existingProxy(of listener: AnyObject) -> _ListenerProxy? {
        entries.first(under: ObjectIdentifier(listener)) { entry in
            entry.proxy.listener.refers(to: listener) ? entry.proxy : nil
        }
    }

    /// Creates and files the proxy of `listener` (unless another thread just
    /// did), sweeping two old entries.
    ///
    /// - Complexity: Amortized O(1) expected.
    static func insertProxy(for listener: AnyObject) -> _ListenerProxy {
        let id = ObjectIdentifier(listener)
        let (proxy, candidates, replaced) = _Registry.withLock { state -> (_ListenerProxy, [Entry], Entry?) in
            if let entry = state.proxies.entries.first(under: id, where: { _ in true }),
                entry.proxy.listener.refers(to: listener)
            {
                return (entry.proxy, [], nil)  // another thread inserted it meanwhile
            }
            let replaced = state.proxies.entries.remove(under: id) { _ in true }
            // Amortized sweep: two old entries per new one, probed after
            // unlocking (a liveness check must not run under the lock).
            let candidates = [state.proxies.nextSweepCandidate(), state.proxies.nextSweepCandidate()].compactMap { $0 }
            let proxy = _ListenerProxy(listener: listener, isInProxyTable: true)
            state.proxies.entries.insert(Entry(id: id, proxy: proxy))
            return (proxy, candidates, replaced)
        }
        replaced?.proxy.removeAll(final: true)
        for (index, candidate) in candidates.enumerated() where index == 0 || candidate.proxy !== candidates[0].proxy {
            removeIfDead(candidate)
        }
        return proxy
    }

    /// Removes `proxy`'s entry (its listener's relations all ended).
    mutating func remove(_ proxy: _ListenerProxy) -> Entry? {
        entries.remove(under: proxy.listenerID) { $0.proxy === proxy }
    }

    /// Removes the entry of `proxy`, retired by
    /// ``_ListenerProxy/forgetRetiringIfEmpty(_:)``.
    ///
    /// - Complexity: O(1) expected.
    static func removeRetired(_ proxy: _ListenerProxy) {
        let removed = _Registry.withLock { $0.proxies.remove(proxy) }
        _ = removed  // released unlocked
    }

    /// The next entry, round-robin, for the sweep; `nil` if 16 slots in a
    /// row are empty (bounded work: the table shrinks below 1/8 load, so an
    /// entry is usually a few slots away).
    private mutating func nextSweepCandidate() -> Entry? {
        for _ in 0..<Swift.min(16, entries.capacity) {
            if sweepCursor >= entries.capacity { sweepCursor = 0 }
            defer { sweepCursor += 1 }
            if let entry = entries.element(inSlot: sweepCursor) { return entry }
        }
        return nil
    }

    /// Removes, and tears down, `entry` if its listener died; returns whether
    /// it did.
    @discardableResult
    private static func removeIfDead(_ entry: Entry) -> Bool {
        guard entry.proxy.listener.isGone else { return false }
        let removed = _Registry.withLock { state in
            state.proxies.entries.remove(under: entry.id) { $0.proxy === entry.proxy }
        }
        removed?.proxy.removeAll(final: true)
        return removed != nil
    }

    /// Tears down every entry whose listener died; returns how many.
    @discardableResult
    static func sweepAll() -> Int {
        _Registry.withLock { $0.proxies.entries.elements }.reduce(0) { count, entry in
            count + (removeIfDead(entry) ? 1 : 0)
        }
    }

    /// Entries, live or not yet swept (leak tests).
    static var count: Int {
        _Registry.withLock { $0.proxies.entries.count }
    }

    /// Slots of the table and entries in it, read together (tests: the
    /// table shrinks after a peak).
    static var capacityAndCount: (capacity: Int, count: Int) {
        _Registry.withLock { ($0.proxies.entries.capacity, $0.proxies.entries.count) }
    }
}
