/// Internal consistency checks, compiled only with the
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
    static func _checkInvariants(of object: some SafeObservable) {
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
    static func _checkInvariants(observedBy listener: AnyObject) {
        #if SAFEOBSERVE_INTERNAL_CHECKS
            _ListenerProxy.of(listener, create: false)?._checkInvariants()
        #endif
    }
}

#if SAFEOBSERVE_INTERNAL_CHECKS
    extension _Channel {
        /// Slots, counts, and proxy membership of every relation on this channel.
        func _checkInvariants() {
            let (relations, isTornDown, counts) = state.withLock { state in
                (state.relations, state.isTornDown, (state.liveCount, state.oldCount, state.priorCount))
            }
            if isTornDown {
                precondition(relations.isEmpty, "_Channel: torn down but still lists relations")
                return
            }
            var live = 0
            var old = 0
            var prior = 0
            for (index, entry) in relations.enumerated() {
                guard let relation = entry else { continue }
                precondition(relation.slot == index, "_Channel: relation at \(index) records slot \(relation.slot)")
                precondition(relation.channel === self, "_Channel: a relation of another channel is listed")
                live += 1
                if relation.options.contains(.old) { old += 1 }
                if relation.options.contains(.prior) { prior += 1 }
                precondition(relation.isActive, "_Channel: an ended relation is still listed")
                precondition(
                    relation.proxy._holds(relation), "_Channel: a listed relation is missing from its listener's proxy")
            }
            precondition(relations.last.map { $0 != nil } ?? true, "_Channel: trailing ended slots were not dropped")
            precondition(counts == (live, old, prior), "_Channel: counts \(counts) but \((live, old, prior))")
        }
    }

    extension _ListenerProxy {
        /// Whether `relation` is filed in this proxy.
        func _holds(_ relation: _Relation) -> Bool {
            state.withLock { state in state.relations.first(under: relation.objectID) { $0 === relation } } != nil
        }

        /// The table, and every relation's state and channel membership.
        func _checkInvariants() {
            let relations = state.withLock { state in
                state.relations._checkInvariants()
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
                        relation.derivation != nil, "_ListenerProxy: a relation with neither channel nor derivation")
                }
            }
        }
    }
#endif
