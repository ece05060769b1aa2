import Synchronization

/// Proxies of listeners that do not adopt ``SafeObserver`` (part of the
/// ``_Registry``).
///
/// Such a listener cannot be given a `deinit` hook on Linux, so its proxy is
/// kept here; the proxy's reference to the listener tells whether it is
/// alive. Each new entry inspects two old ones (round-robin) and tears down
/// those whose listener died, so dead entries never outnumber live ones by
/// more than a constant factor, with O(1) work per registration.
struct _ProxyTable {
    struct Entry: _AddressKeyed {
        /// The listener's identity when it registered.
        let id: ObjectIdentifier
        /// The listener's proxy. Its reference to the listener (never
        /// retained) tells whether the listener is alive; on Linux it also
        /// keeps the listener's allocation, so its address is not reused
        /// meanwhile.
        ///
        /// Unmanaged: the table owns one retain of the proxy per entry,
        /// taken when the entry is filed and handed over with it when it is
        /// removed (``take(_:)``), so that the slots are plain bits: a
        /// rehash or a removal moves them, and a shrink frees the old ones,
        /// without counting references or running the runtime's generic
        /// destructor over every slot (a third of an object's teardown).
        let proxy: Unmanaged<_ListenerProxy>

        var tableKey: ObjectIdentifier { id }

        /// Whether this entry is `proxy`'s.
        func holds(_ proxy: _ListenerProxy) -> Bool {
            self.proxy.toOpaque() == Unmanaged.passUnretained(proxy).toOpaque()
        }
    }

    private var entries = _AddressTable<Entry>()
    /// Round-robin position of the sweep, a slot of `entries`.
    private var sweepCursor = 0

    /// The proxy of a removed entry, with the retain the table held.
    private static func take(_ entry: Entry?) -> _ListenerProxy? {
        entry?.proxy.takeRetainedValue()
    }

    /// The proxy of `listener`, if it has one.
    ///
    /// An entry at the listener's address is this listener's unless the
    /// platform can reuse a dead listener's address before its entry is swept
    /// (the portable probes: a weak reference does not keep the allocation).
    /// Such an entry is never returned (with `create`, ``insertProxy(for:)``
    /// replaces it). The proxy may be retired, its entry not taken out yet
    /// (an object's teardown takes the proxies it retires out together, at
    /// its end): ``_ListenerProxy/of(_:create:found:)`` then makes a new one,
    /// so that a registration meanwhile does not retry until then.
    ///
    /// - Complexity: O(1) expected.
    func existingProxy(of listener: AnyObject) -> _ListenerProxy? {
        entries.first(under: ObjectIdentifier(listener)) { entry in
            let proxy = entry.proxy.takeUnretainedValue()  // the entry keeps it, under the lock
            return proxy.listener.refers(to: listener) ? proxy : nil
        }
    }

    /// Creates and files the proxy of `listener` (unless another thread just
    /// did), sweeping two old entries.
    ///
    /// - Complexity: Amortized O(1) expected.
    static func insertProxy(for listener: AnyObject) -> _ListenerProxy {
        let id = ObjectIdentifier(listener)
        let (proxy, candidates, replaced) = _Registry.withLock {
            state -> (_ListenerProxy, [_ListenerProxy], _ListenerProxy?) in
            if let existing = state.proxies.existingProxy(of: listener), !existing.isRetired.load(ordering: .relaxed) {
                return (existing, [], nil)  // another thread inserted it meanwhile
            }
            let replaced = take(state.proxies.entries.remove(under: id) { _ in true })
            // Amortized sweep: two old entries per new one, probed after
            // unlocking (a liveness check must not run under the lock).
            let candidates = [state.proxies.nextSweepCandidate(), state.proxies.nextSweepCandidate()].compactMap { $0 }
            let proxy = _ListenerProxy(listener: listener, isInProxyTable: true)
            state.proxies.entries.insert(Entry(id: id, proxy: .passRetained(proxy)))
            return (proxy, candidates, replaced)
        }
        replaced?.removeAll(final: true)
        for (index, candidate) in candidates.enumerated() where index == 0 || candidate !== candidates[0] {
            removeIfDead(candidate)
        }
        return proxy
    }

    /// Removes `proxy`'s entry (its listener's relations all ended),
    /// returning the table's reference to it.
    mutating func remove(_ proxy: _ListenerProxy) -> _ListenerProxy? {
        Self.take(entries.remove(under: proxy.listenerID) { $0.holds(proxy) })
    }

    /// Removes the entries of `first` and `rest`, proxies retired by
    /// ``_ListenerProxy/forgetRetiringIfEmpty(_:)`` or
    /// ``_ListenerProxy/retireIfEmpty()``, in one critical section. When
    /// they are a large part of the table (an object with many relations
    /// died), in one pass over it that also takes out any proxy another
    /// thread retired meanwhile, with a single shrink at the end, rather
    /// than one removal and several shrinks per proxy.
    ///
    /// The table's references are released under the lock: the caller's
    /// (or, for a proxy another thread retired, that thread's) keep each
    /// proxy alive until it returns.
    ///
    /// One by one, the lock is taken for 64 proxies at a time, so that it
    /// stays short (registrations and tracked reads take it); the one pass
    /// is the exception, bounded by the proxies it removes (at least a
    /// quarter of the table).
    ///
    /// - Complexity: O(*k*) expected for *k* proxies, or O(capacity) when
    ///   *k* is at least a quarter of the entries.
    static func removeRetired(_ first: _ListenerProxy, _ rest: [_ListenerProxy]) {
        let inOnePass = _Registry.withLock { state -> Bool in
            guard rest.count >= 15, (rest.count + 1) * 4 >= state.proxies.entries.count else {
                _ = state.proxies.remove(first)
                return false
            }
            state.proxies.entries.removeAll { entry in
                // Unmanaged: the entry's retain keeps the proxy, under the lock.
                entry.proxy._withUnsafeGuaranteedRef { $0.isRetired.load(ordering: .relaxed) }
            } take: { entry in
                entry.proxy.release()
            }
            return true
        }
        guard !inOnePass else { return }
        var start = rest.startIndex
        while start < rest.endIndex {
            let end = Swift.min(start + 64, rest.endIndex)
            _Registry.withLock { state in
                for proxy in rest[start..<end] { _ = state.proxies.remove(proxy) }
            }
            start = end
        }
    }

    /// The proxy of the next entry, round-robin, for the sweep; `nil` if 16
    /// slots in a row are empty (bounded work: the table shrinks below 1/8
    /// load, so an entry is usually a few slots away).
    private mutating func nextSweepCandidate() -> _ListenerProxy? {
        for _ in 0..<Swift.min(16, entries.capacity) {
            if sweepCursor >= entries.capacity { sweepCursor = 0 }
            defer { sweepCursor += 1 }
            if let entry = entries.element(inSlot: sweepCursor) { return entry.proxy.takeUnretainedValue() }
        }
        return nil
    }

    /// Removes, and tears down, `proxy`'s entry if its listener died;
    /// returns whether it did.
    @discardableResult
    private static func removeIfDead(_ proxy: _ListenerProxy) -> Bool {
        guard proxy.listener.isGone else { return false }
        let removed = _Registry.withLock { $0.proxies.remove(proxy) }
        removed?.removeAll(final: true)
        return removed != nil
    }

    /// Tears down every entry whose listener died; returns how many.
    @discardableResult
    static func sweepAll() -> Int {
        _Registry.withLock { state in
            state.proxies.entries.elements.map { $0.proxy.takeUnretainedValue() }
        }.reduce(0) { count, proxy in
            count + (removeIfDead(proxy) ? 1 : 0)
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
