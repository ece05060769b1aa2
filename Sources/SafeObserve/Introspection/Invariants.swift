/// Internal consistency checks (underscored: not API), compiled only with the
/// `SAFEOBSERVE_INTERNAL_CHECKS` define (Package.swift sets it for debug
/// builds, so the tests run them; release builds compile them away).
///
/// Call them at quiescent points — no registration, removal or delivery in
/// flight on the objects involved — as the model-based tests do after every
/// step. Each check takes one lock at a time, never two.
extension SafeObservation {
    /// Checks the cross-references of every relation on `object`'s properties
    /// and of every relation its listeners' proxies hold: channel slots and
    /// counts, proxy membership, and each proxy's table.
    ///
    /// ```swift
    /// SafeObservation._checkInvariants(of: counter)   // tests, after each step
    /// ```
    public static func _checkInvariants(of object: some SafeObservable) {
        #if SAFEOBSERVE_INTERNAL_CHECKS
            for channel in _channels(of: object) {
                channel._checkInvariants()
            }
        #endif
    }

    /// Checks the proxy of `listener`: its table, and that every relation it
    /// holds is active, belongs to it, and sits in its channel's list.
    ///
    /// ```swift
    /// SafeObservation._checkInvariants(observedBy: label)
    /// ```
    public static func _checkInvariants(observedBy listener: AnyObject) {
        #if SAFEOBSERVE_INTERNAL_CHECKS
            _ListenerProxy.of(listener, create: false)?._checkInvariants()
        #endif
    }
}

#if SAFEOBSERVE_INTERNAL_CHECKS
    extension _Channel {
        /// Slots and counts (under the lock), then proxy membership of every
        /// relation whose listener is alive. (A dead plain listener's
        /// relations may be in the middle of being swept by another thread —
        /// ended and gone from the proxy, not yet from the channel — so they
        /// are only checked for slots and counts. So are the dependencies of
        /// a derived relation whose listener died: the sweep ending that
        /// relation ends them too.)
        func _checkInvariants() {
            let relations = state.withLock { state -> ContiguousArray<_Relation?> in
                if state.isTornDown {
                    precondition(state.relations.isEmpty, "_Channel: torn down but still lists relations")
                }
                var counts = (live: 0, old: 0, prior: 0)
                for (index, entry) in state.relations.enumerated() {
                    guard let relation = entry else { continue }
                    precondition(relation.slot == index, "_Channel: relation at \(index) records slot \(relation.slot)")
                    precondition(relation.channel === self, "_Channel: a relation of another channel is listed")
                    counts.live += 1
                    if relation.options.contains(.old) { counts.old += 1 }
                    if relation.options.contains(.prior) { counts.prior += 1 }
                }
                precondition(
                    (state.liveCount, state.oldCount, state.priorCount) == counts,
                    "_Channel: counts \((state.liveCount, state.oldCount, state.priorCount)) but \(counts)")
                precondition(
                    (state.needs.contains(.old), state.needs.contains(.prior))
                        == (state.oldCount > 0, state.priorCount > 0),
                    "_Channel: needs disagree with the counts")
                precondition(state.relations.last.map { $0 != nil } ?? true, "_Channel: trailing ended slots kept")
                return state.relations
            }
            for case let relation? in relations where !relation._isOfDeadListener {
                precondition(relation.isActive, "_Channel: an ended relation of a live listener is still listed")
                precondition(
                    relation.isDependency ? relation._isListedByItsDerivation : relation.proxy._holds(relation),
                    "_Channel: a listed relation is missing from its listener's proxy (or derivation)")
            }
        }
    }

    extension _Relation {
        /// Whether this dependency is in its derivation's list (or the
        /// derivation is gone).
        var _isListedByItsDerivation: Bool {
            // unsafeDowncast: a dependency's listener is always its derivation.
            guard let derivation = listener.load().map({ unsafeDowncast($0, to: _Derivation.self) }) else {
                return true
            }
            return derivation.state.withLock { state in state.dependencies.contains { $0 === self } }
        }

        /// Whether the listener died — for a dependency, the listener of the
        /// derived relation it serves (or that relation is gone).
        var _isOfDeadListener: Bool {
            if listener.isGone { return true }
            guard isDependency else { return false }
            // unsafeDowncast: a dependency's listener is always its derivation.
            guard let derivation = listener.load().map({ unsafeDowncast($0, to: _Derivation.self) }),
                let served = derivation.state.withLock({ $0.relation })?.load()
            else { return true }
            // unsafeDowncast: `state.relation` is only ever made from a `_Relation`.
            return unsafeDowncast(served, to: _Relation.self).listener.isGone
        }
    }

    extension _ListenerProxy {
        /// Whether `relation` is filed in this proxy.
        func _holds(_ relation: _Relation) -> Bool {
            withLock { state in state.relations.first(under: relation.tableKey) { $0 === relation } } != nil
        }

        /// The table, and every relation's state and channel membership.
        func _checkInvariants() {
            let relations = withLock { state in
                state.relations._checkInvariants()
                var derived: [ObjectIdentifier: Int] = [:]
                for relation in state.relations.elements where relation.channel == nil {
                    derived[relation.objectID, default: 0] += 1
                }
                precondition(derived == state.derivedCounts, "_ListenerProxy: derived relations miscounted")
                return state.relations.elements
            }
            for relation in relations {
                precondition(relation.proxy === self, "_ListenerProxy: holds another proxy's relation")
                precondition(relation.isActive, "_ListenerProxy: holds an ended relation")
                if let channel = relation.channel {
                    let listed = channel.state.withLock { state in
                        relation.slot >= 0 && relation.slot < state.relations.count
                            && state.relations[relation.slot] === relation
                    }
                    precondition(listed, "_ListenerProxy: an active relation is missing from its channel")
                } else {
                    precondition(
                        relation is _DerivedRelation, "_ListenerProxy: a relation with neither channel nor derivation")
                }
            }
        }
    }
#endif
