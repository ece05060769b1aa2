/// Calls one relation's handler.
///
/// `change` points to an `ObservedChange<Value>` carrying both the old and the
/// new value; the closure — created where `safeObserve` was called, so it is
/// specialized for the concrete types — casts it back and keeps only what the
/// relation's options ask for. Keeping `Value` out of the channel keeps the
/// delivery loop free of generic metadata lookups.
@usableFromInline
typealias _Deliver =
    @Sendable (_ listener: AnyObject, _ root: AnyObject, _ change: UnsafeRawPointer, _ isPrior: Bool) ->
    Void

/// One relation as the observed side stores it: the token and the handler.
///
/// The handler lives here and nowhere else, so removing a relation from its
/// channel is what releases the handler closure and everything it captured.
@usableFromInline
struct _Subscriber {
    let token: ObservationToken
    /// The handler; `_tombstone` once the relation was removed.
    var deliver: _Deliver
    /// `false` once the relation was removed (a tombstone until compaction).
    var isLive: Bool
}

/// Replaces a removed relation's handler, so the real one can be released.
let _tombstone: _Deliver = { _, _, _, _ in }

/// The relations registered on one `@Observed` property of one object.
///
/// A channel is shared state: its object's storage reaches it through the
/// ``_Sentinel``, and every ``ObservationToken`` on it holds it strongly so it
/// can remove itself whatever the order of deaths. All mutable state is inside
/// one `_Mutex`; no user code runs while it is held (handlers, and the closures
/// whose release could run user `deinit`s, are moved out first).
@usableFromInline
final class _Channel: Sendable {
    struct State {
        /// Registration order; removed relations are tombstones (`isLive == false`).
        var subscribers: ContiguousArray<_Subscriber> = []
        var liveCount = 0
        /// Live relations asking for `.old` (the setter copies the old value only then).
        var oldCount = 0
        /// Live relations asking for `.prior`.
        var priorCount = 0
        /// Round-robin position of the sweep for relations whose listener died.
        var sweepCursor = 0
        var isTornDown = false
    }

    /// What one change delivers to: a snapshot taken under the lock.
    @usableFromInline
    struct Emission {
        let subscribers: ContiguousArray<_Subscriber>
        @usableFromInline let needsOld: Bool
        @usableFromInline let hasPrior: Bool
        /// Relations found with a dead listener; removed after delivery.
        var orphans: [ObservationToken] = []

        init(subscribers: ContiguousArray<_Subscriber>, needsOld: Bool, hasPrior: Bool) {
            self.subscribers = subscribers
            self.needsOld = needsOld
            self.hasPrior = hasPrior
        }

        /// Delivers one phase of a change to the snapshot, unlocked.
        ///
        /// A relation removed meanwhile (even by an earlier handler of this
        /// very loop) is skipped; a relation whose listener died is collected
        /// for removal once delivery is over.
        ///
        /// - Complexity: O(*n*) in the relations of this property only.
        @usableFromInline
        mutating func deliver(root: AnyObject, change: UnsafeRawPointer, isPrior: Bool) {
            for subscriber in subscribers where subscriber.isLive {
                let token = subscriber.token
                if isPrior, !token.options.contains(.prior) { continue }
                guard token.isActive else { continue }
                guard let listener = token.listener else {
                    orphans.append(token)
                    continue
                }
                subscriber.deliver(listener, root, change, isPrior)
            }
        }

        /// Removes the relations of dead listeners met during delivery.
        @usableFromInline
        func removeOrphans() {
            for orphan in orphans { orphan._remove() }
        }

        /// Delivers one change of `root`'s property: `.prior` relations
        /// before `mutate`, the others after it.
        ///
        /// `root` is kept alive throughout (a handler may drop the last other
        /// reference to it while the caller only borrows it). `readOld` runs
        /// only when some relation asks for `.old`. If `mutate` throws, no
        /// change is delivered. Inlined into the property's setter, so the
        /// closures' storage accesses fold to direct field accesses.
        @inlinable
        mutating func deliverChange<Value, Result>(
            of root: AnyObject,
            readOld: () -> Value,
            mutate: () throws -> Result,
            readNew: () -> Value
        ) rethrows -> Result {
            // Unmanaged retain: balanced by the release when this returns.
            let retained = Unmanaged.passRetained(root)
            defer { retained.release() }
            let old: Value? = needsOld ? readOld() : nil
            if hasPrior {
                withUnsafePointer(to: ObservedChange(newValue: nil, oldValue: old)) {
                    deliver(root: root, change: $0, isPrior: true)
                }
            }
            defer { removeOrphans() }
            let result = try mutate()
            withUnsafePointer(to: ObservedChange(newValue: readNew(), oldValue: old)) {
                deliver(root: root, change: $0, isPrior: false)
            }
            return result
        }
    }

    let state = _Mutex(State())

    init() {}

    // MARK: Registration

    /// Appends a relation; `false` if the property's object died meanwhile or
    /// the token was already removed by a concurrent unobserve.
    ///
    /// Also inspects two older relations (round-robin) and removes those whose
    /// listener died, so that relations of dead listeners on an object that
    /// never changes stay bounded.
    ///
    /// - Complexity: Amortized O(1).
    func add(
        _ token: ObservationToken,
        deliver: @escaping _Deliver
    ) -> Bool {
        let (added, candidates) = state.withLock { state -> (Bool, [ObservationToken]) in
            guard !state.isTornDown, token.isActive else { return (false, []) }
            // Amortized sweep: two older relations per new one, checked after
            // unlocking (a liveness check must not run under the lock).
            var candidates: [ObservationToken] = []
            let count = state.subscribers.count
            if count > 0 {
                for _ in 0..<2 {
                    if state.sweepCursor >= count { state.sweepCursor = 0 }
                    let subscriber = state.subscribers[state.sweepCursor]
                    if subscriber.isLive { candidates.append(subscriber.token) }
                    state.sweepCursor += 1
                }
            }
            token._slot = count
            state.subscribers.append(_Subscriber(token: token, deliver: deliver, isLive: true))
            state.liveCount += 1
            if token.options.contains(.old) { state.oldCount += 1 }
            if token.options.contains(.prior) { state.priorCount += 1 }
            return (true, candidates)
        }
        for candidate in candidates where candidate._isListenerGone {
            candidate._remove()
        }
        return added
    }

    /// - Complexity: Amortized O(1): removal leaves a tombstone, and the list is
    ///   compacted in one pass once tombstones outnumber live relations.
    func remove(_ token: ObservationToken) {
        let released = state.withLock { state -> _Deliver? in
            let slot = token._slot
            guard !state.isTornDown, slot >= 0, slot < state.subscribers.count,
                state.subscribers[slot].token === token
            else { return nil }
            let deliver = state.subscribers[slot].deliver
            state.subscribers[slot].deliver = _tombstone
            state.subscribers[slot].isLive = false
            token._slot = -1
            state.liveCount -= 1
            if token.options.contains(.old) { state.oldCount -= 1 }
            if token.options.contains(.prior) { state.priorCount -= 1 }
            let dead = state.subscribers.count - state.liveCount
            if dead >= 16, dead > state.liveCount {
                Self.compact(&state)
            }
            return deliver
        }
        // The handler (and whatever it captured) is released here, unlocked.
        _ = released
    }

    private static func compact(_ state: inout State) {
        var kept = ContiguousArray<_Subscriber>()
        kept.reserveCapacity(state.liveCount)
        for subscriber in state.subscribers where subscriber.isLive {
            subscriber.token._slot = kept.count
            kept.append(subscriber)
        }
        state.subscribers = kept
        state.sweepCursor = 0
    }

    // MARK: Emission

    /// Takes the snapshot a change is delivered to, or `nil` when nobody
    /// listens or `root` is inside its own `deinit`.
    ///
    /// - Complexity: O(1): one lock and one retain of the relation list.
    @usableFromInline
    func beginEmission(on root: AnyObject) -> Emission? {
        let emission = state.withLock { state -> Emission? in
            guard state.liveCount > 0 else { return nil }
            return Emission(
                subscribers: state.subscribers,
                needsOld: state.oldCount > 0,
                hasPrior: state.priorCount > 0
            )
        }
        guard let emission, !_swift_isDeallocating(root) else { return nil }
        return emission
    }

    // MARK: Teardown

    /// Called once, from the sentinel's `deinit`: the object died.
    ///
    /// Every relation is marked removed, every listener proxy forgets it, and
    /// every handler is released — after the lock is dropped.
    ///
    /// - Complexity: O(*n*) in the relations of this property.
    func tearDown() {
        let subscribers = state.withLock { state -> ContiguousArray<_Subscriber> in
            state.isTornDown = true
            state.liveCount = 0
            state.oldCount = 0
            state.priorCount = 0
            defer { state.subscribers = [] }
            return state.subscribers
        }
        var byProxy: [ObjectIdentifier: (proxy: _ListenerProxy, tokens: [ObservationToken])] = [:]
        for subscriber in subscribers where subscriber.isLive {
            let token = subscriber.token
            guard token._markRemoved(), let proxy = token.proxy else { continue }
            byProxy[ObjectIdentifier(proxy), default: (proxy, [])].tokens.append(token)
        }
        for (_, group) in byProxy {
            group.proxy.forget(group.tokens)
        }
        // `subscribers` (and so every handler) is released here, unlocked.
    }

    // MARK: Introspection

    func liveTokens() -> [ObservationToken] {
        state.withLock { state in
            state.subscribers.compactMap { $0.isLive && $0.token.isActive ? $0.token : nil }
        }
    }
}
