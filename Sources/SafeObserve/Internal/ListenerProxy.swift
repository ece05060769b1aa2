/// The listener's side of its relations: which objects it observes, and
/// which key paths of each.
///
/// A proxy lives in the listener's ``ObserverLifetime`` (listeners adopting
/// ``SafeObserver``, torn down inside their own `deinit`) or in the global
/// ``_ProxyTable`` (any other class, torn down by the sweep, by the next change
/// that reaches a dead listener, or by the observed object's death).
final class _ListenerProxy: Sendable {
    struct State {
        /// Relations by observed object, each list in registration order.
        var relations: [ObjectIdentifier: _RelationList] = [:]
        var isTornDown = false
    }

    let state = _Mutex(State())

    init() {}

    /// The active relation for (`object`, `keyPath`) if there is one on
    /// `channel`; otherwise the relation `make` returns, recorded.
    ///
    /// `nil` when the proxy was torn down (its listener is being destroyed).
    /// A relation with the same object identity but another channel belongs to
    /// a dead object whose address was reused: it is replaced, never reused.
    ///
    /// - Complexity: O(*k*), *k* being the key paths observed on `object`.
    func relation(
        for object: ObjectIdentifier, keyPath: AnyKeyPath, channel: _Channel,
        orInsert make: () -> _Relation
    ) -> (relation: _Relation, inserted: Bool)? {
        let (result, stale) = state.withLock { state -> ((_Relation, Bool)?, [_Relation]) in
            guard !state.isTornDown else { return (nil, []) }
            var stale: [_Relation] = []
            // Mutate the list in place (no copy-on-write of the array).
            let result = { (list: inout _RelationList) -> (_Relation, Bool) in
                list.removeAll { relation in
                    if !relation.isActive { return true }
                    if relation.channel !== channel, relation.keyPath == keyPath {
                        stale.append(relation)
                        return true
                    }
                    return false
                }
                if let existing = list.first(where: { $0.keyPath == keyPath }) {
                    return (existing, false)
                }
                let relation = make()
                list.append(relation)
                return (relation, true)
            }(&state.relations[object, default: _RelationList()])
            return (result, stale)
        }
        for relation in stale { relation.end() }
        return result
    }

    /// Forgets `relation` (already ended by the caller).
    ///
    /// - Complexity: O(*k*), *k* being the key paths observed on its object.
    func forget(_ relation: _Relation) {
        let released = state.withLock { state in Self.forget(relation, in: &state) }
        // The proxy's reference is dropped here, unlocked.
        _ = released
    }

    /// Forgets `relations` (already ended by the caller).
    ///
    /// - Complexity: O(*k* + *m*) per observed object touched.
    func forget(_ relations: [_Relation]) {
        let released = state.withLock { state in relations.compactMap { Self.forget($0, in: &state) } }
        _ = released
    }

    private static func forget(_ relation: _Relation, in state: inout State) -> _Relation? {
        guard let position = state.relations.index(forKey: relation.objectID) else { return nil }
        // Mutate the list in place (no copy-on-write of the array).
        let found = state.relations.values[position].remove(relation)
        if state.relations.values[position].isEmpty {
            state.relations.remove(at: position)
        }
        return found
    }

    /// The relations on `object` (or on every object when `nil`).
    func relations(on object: ObjectIdentifier?) -> [_Relation] {
        state.withLock { state in
            if let object {
                return (state.relations[object] ?? _RelationList()).filter(\.isActive)
            }
            return state.relations.values.flatMap { $0.filter(\.isActive) }
        }
    }

    /// Removes every relation; with `final`, the proxy accepts no new ones.
    ///
    /// - Complexity: O(*n*) in the listener's relations.
    func removeAll(final: Bool) {
        // The relations are marked ended under the lock: a concurrent
        // unobserve that finds this proxy empty must never return while one
        // of them still delivers. Detaching them from their channels (which
        // releases the handlers) happens after unlocking.
        let ended = state.withLock { state -> [_Relation] in
            if final { state.isTornDown = true }
            var ended: [_Relation] = []
            for (_, list) in state.relations {
                for relation in list where relation.markEnded() {
                    ended.append(relation)
                }
            }
            state.relations = [:]
            return ended
        }
        for relation in ended {
            relation.channel.remove(relation)
        }
    }

    /// Finds the proxy of `listener`: its ``ObserverLifetime`` if it adopts
    /// ``SafeObserver``, the global table's entry otherwise.
    ///
    /// With `create: false`, nothing is ever allocated (safe inside `deinit`).
    static func of(_ listener: AnyObject, create: Bool) -> _ListenerProxy? {
        if let observer = listener as? any SafeObserver {
            return observer.observerLifetime.proxy
        }
        return _ProxyTable.shared.proxy(for: listener, create: create)
    }
}

/// The relations a listener holds on one object, in registration order.
///
/// Most listeners observe one key path per object: that one is stored inline,
/// so it costs no array allocation; more go to `tail`.
struct _RelationList: Sequence {
    /// `nil` only when the list is empty.
    private var head: _Relation?
    private var tail: ContiguousArray<_Relation> = []

    init() {}

    var isEmpty: Bool { head == nil }

    mutating func append(_ relation: _Relation) {
        if head == nil {
            head = relation
        } else {
            tail.append(relation)
        }
    }

    /// - Complexity: O(*n*).
    /// Removes `relation` if present; returns it.
    ///
    /// - Complexity: O(*n*).
    mutating func remove(_ relation: _Relation) -> _Relation? {
        var found: _Relation?
        removeAll { candidate in
            guard candidate === relation else { return false }
            found = candidate
            return true
        }
        return found
    }

    mutating func removeAll(where shouldBeRemoved: (_Relation) -> Bool) {
        if let first = head, shouldBeRemoved(first) {
            head = nil
        }
        if !tail.isEmpty {
            tail.removeAll(where: shouldBeRemoved)
        }
        if head == nil, !tail.isEmpty {
            head = tail.removeFirst()
        }
    }

    struct Iterator: IteratorProtocol {
        fileprivate var head: _Relation?
        fileprivate var tail: IndexingIterator<ContiguousArray<_Relation>>

        mutating func next() -> _Relation? {
            if let first = head {
                head = nil
                return first
            }
            return tail.next()
        }
    }

    func makeIterator() -> Iterator {
        Iterator(head: head, tail: tail.makeIterator())
    }
}

/// Proxies of listeners that do not adopt ``SafeObserver``.
///
/// Such a listener cannot be given a `deinit` hook on Linux, so its proxy is
/// kept here, next to a weak reference that tells whether it is alive. Each
/// new entry inspects two old ones (round-robin) and tears down those whose
/// listener died, so dead entries never outnumber live ones by more than a
/// constant factor, with O(1) work per registration.
final class _ProxyTable: Sendable {
    struct Entry: Sendable {
        /// The listener's identity when it registered (the key in `index`).
        let id: ObjectIdentifier
        /// The listener, never retained. (On Linux it also keeps the
        /// listener's allocation, so its address is not reused meanwhile.)
        let listener: _UnretainedReference
        let proxy: _ListenerProxy
    }

    struct State {
        var entries: [Entry] = []
        var index: [ObjectIdentifier: Int] = [:]
        var sweepCursor = 0
    }

    static let shared = _ProxyTable()

    let state = _Mutex(State())

    /// - Complexity: Amortized O(1).
    func proxy(for listener: AnyObject, create: Bool) -> _ListenerProxy? {
        let id = ObjectIdentifier(listener)
        let (proxy, candidates) = state.withLock { state -> (_ListenerProxy?, [Entry]) in
            if let position = state.index[id] {
                // An entry at this address is this listener's: alive, or inside
                // its deinit (registering from a deinit is refused earlier).
                let entry = state.entries[position]
                if !create || entry.listener.isAlive(heldByCaller: listener) {
                    return (entry.proxy, [])
                }
                return (nil, [])
            }
            guard create else { return (nil, []) }
            // Amortized sweep: two old entries per new one, checked after
            // unlocking (a liveness check must not run under the lock).
            var candidates: [Entry] = []
            for _ in 0..<2 where !state.entries.isEmpty {
                if state.sweepCursor >= state.entries.count { state.sweepCursor = 0 }
                candidates.append(state.entries[state.sweepCursor])
                state.sweepCursor += 1
            }
            let proxy = _ListenerProxy()
            state.index[id] = state.entries.count
            state.entries.append(Entry(id: id, listener: _UnretainedReference(listener), proxy: proxy))
            return (proxy, candidates)
        }
        removeIfDead(candidates)
        return proxy
    }

    /// Removes, and tears down, those of `candidates` whose listener died;
    /// returns how many it removed.
    @discardableResult
    private func removeIfDead(_ candidates: [Entry]) -> Int {
        let dead = candidates.filter(\.listener.isGone)
        guard !dead.isEmpty else { return 0 }
        let removed = state.withLock { state -> [_ListenerProxy] in
            dead.compactMap { entry in
                guard let position = state.index[entry.id], state.entries[position].proxy === entry.proxy else {
                    return nil
                }
                return Self.remove(at: position, from: &state)
            }
        }
        for proxy in removed { proxy.removeAll(final: true) }
        return removed.count
    }

    /// Removes the entry at `position` by moving the last one into its place.
    ///
    /// - Complexity: O(1).
    private static func remove(at position: Int, from state: inout State) -> _ListenerProxy {
        let removed = state.entries[position]
        state.index[removed.id] = nil
        let last = state.entries.removeLast()
        if position < state.entries.count {
            state.entries[position] = last
            state.index[last.id] = position
        }
        return removed.proxy
    }

    /// Tears down every entry whose listener died; returns how many.
    @discardableResult
    func sweepAll() -> Int {
        removeIfDead(state.withLock { $0.entries })
    }

    /// Entries, live or not yet swept (leak tests).
    var count: Int {
        state.withLock { $0.entries.count }
    }
}
