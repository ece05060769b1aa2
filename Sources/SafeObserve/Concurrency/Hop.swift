import Synchronization

/// Delivers the changes of one isolated relation (a handler registered from
/// an actor) on that actor.
///
/// A change made on the actor is delivered at once, synchronously, after any
/// change still queued for the relation. A change made elsewhere is queued,
/// and the first change queued schedules one job on the actor that delivers
/// the queue, in order. When the job runs it drops every queued change if
/// the relation ended, the listener died or the object died meanwhile.
///
/// The hop is owned by the relation's delivery thunk, so it dies with the
/// relation, releasing the handler and its captures; a scheduled job does
/// not keep it alive. Neither the hop nor a job keeps the listener, the object or the
/// actor alive: they are reached through liveness-probed references.
@usableFromInline
// @unchecked Sendable: `handler` is called only on the hop's actor (the
// caller checks `isOnActorAfterQueued()`, or is the job scheduled on it);
// `state` is reached only under its lock; everything else is immutable or
// atomic.
final class _Hop<Listener: AnyObject, Root: AnyObject, Value>: @unchecked Sendable {
    // The generic paths are inlinable, so that they are specialized where
    // the relation is registered: unspecialized, each would look up the
    // metadata of the queue's types at every change.

    /// The handler's actor's executor, for the same-actor check. Its identity
    /// stays unique while `actorReference` keeps the actor's allocation.
    @usableFromInline let executor: UnownedSerialExecutor
    /// The handler. Not Sendable: see above.
    @usableFromInline let handler: (Listener, Root, ObservedChange<Value>) -> Void
    /// Whether changes are queued (mirrors `state`, written under its lock):
    /// the same-actor path reads it without locking.
    @usableFromInline let hasPending = Atomic<Bool>(false)
    /// Whether the actor is the main actor.
    @usableFromInline let isMainActor: Bool
    /// The relation's options (what the thunk hands the handler of a change).
    @usableFromInline let options: ObservationOptions
    /// Whether the relation receives the new value alone (the usual case,
    /// built without testing each option).
    @usableFromInline let receivesNewValueOnly: Bool
    @usableFromInline let root: _UnretainedReference
    /// Keeps the actor's allocation (so `executor` never names another
    /// actor), never the actor itself.
    @usableFromInline let actorReference: _UnretainedReference
    @usableFromInline let state = _Mutex(State())

    /// A hop to `actor` for a relation on `root`.
    @usableFromInline
    init(
        actor: any Actor, root: Root, options: ObservationOptions,
        handler: @escaping (Listener, Root, ObservedChange<Value>) -> Void
    ) {
        executor = actor.unownedExecutor
        self.handler = handler
        self.options = options
        receivesNewValueOnly = options.intersection([.new, .old, .prior]) == .new
        self.root = _UnretainedReference(root)
        actorReference = _UnretainedReference(actor)
        isMainActor = actor === MainActor.shared
    }

    /// Gives the hop its relation (from its token), which a job checks before
    /// each delivery. A job that runs before (a change made elsewhere while
    /// an actor listener was being registered from outside it) leaves the
    /// queue to the job this schedules.
    @inlinable
    func attach(_ token: ObservationToken) {
        if state.withLock({ $0.attach(token._relation) }) { schedule() }
    }

    // MARK: Delivery

    /// Whether this thread runs on the actor, having delivered what is still
    /// queued if so: the caller then delivers its change synchronously (the
    /// thunk's own typed call, as for a nonisolated handler); otherwise it
    /// queues it with ``enqueue(_:)``.
    @inlinable
    func isOnActorAfterQueued() -> Bool {
        guard _isCurrentExecutor(executor, isMainActor: isMainActor) else { return false }
        if hasPending.load(ordering: .acquiring) { deliverQueuedFirst() }
        return true
    }

    /// Delivers what is queued before a same-actor change (out of line, so
    /// that the same-actor path stays small).
    @inlinable @inline(never)
    func deliverQueuedFirst() {
        deliverQueued(endingJob: false)
    }

    /// Delivers what the relation receives of the change `change` points
    /// to, synchronously on the actor or queued from elsewhere: the thunk of
    /// a key-path relation.
    @inlinable
    func deliver(_ listener: AnyObject, _ root: AnyObject, _ change: UnsafeRawPointer, _ phase: _Phase) {
        guard isOnActorAfterQueued() else { return enqueue(change, phase) }
        let observedChange =
            if receivesNewValueOnly {
                // `.prior` is not among the options, so this is a change.
                ObservedChange(
                    newValue: change.assumingMemoryBound(to: ObservedChange<Value>.self).pointee.newValue, oldValue: nil
                )
            } else {
                _observedChange(options, change, phase, Value.self)
            }
        // unsafeDowncast: the relation's listener and object are the ones
        // this hop was made for.
        handler(unsafeDowncast(listener, to: Listener.self), unsafeDowncast(root, to: Root.self), observedChange)
    }

    /// Queues what the relation receives of the change `change` points to
    /// (out of line, as above).
    @inlinable @inline(never)
    func enqueue(_ change: UnsafeRawPointer, _ phase: _Phase) {
        enqueue(_observedChange(options, change, phase, Value.self))
    }

    /// Queues `change` and, if no job is scheduled, schedules one.
    @inlinable
    func enqueue(_ change: ObservedChange<Value>) {
        let action = state.withLock {
            $0.enqueue(change, coalescing: options.contains(.coalesced), hasPending: hasPending)
        }
        switch action {
        case .none(let replaced):
            _ = replaced  // released here, unlocked: a value's deinit may be user code
        case .schedule:
            schedule()
        }
    }

    /// Schedules the job that delivers the queue on the actor. Nothing is
    /// kept alive until it runs but the job itself: it reaches the hop and
    /// the actor through unretained references (not weak ones, which would
    /// give each of them a side table for the rest of its life).
    @inlinable
    func schedule() {
        let hop = _unretained(self)
        if isMainActor {
            // Enqueued on the main actor directly.
            Task { @MainActor in
                // unsafeDowncast: `hop` was made from this hop.
                guard let object = _load(hop) else { return }
                unsafeDowncast(object, to: _Hop.self).deliverQueued(endingJob: true)
            }
            return
        }
        guard _liveActor(actorReference) != nil else {
            actorDied()
            return
        }
        let actorReference = actorReference
        Task {
            guard let object = _load(hop) else { return }
            // unsafeDowncast: `hop` was made from this hop.
            let hop = unsafeDowncast(object, to: _Hop.self)
            guard let actor = _liveActor(actorReference) else {
                hop.actorDied()
                return
            }
            await Self.deliverQueued(hop, on: actor)
        }
    }

    /// The actor died: nothing can run there any more, so the relation ends
    /// and the queue (with the job, which will not run) is dropped.
    @inlinable
    func actorDied() {
        _endRelation(state.withLock { $0.relation })
        dropQueue(endingJob: true)
    }

    @inlinable
    static func deliverQueued(_ hop: _Hop, on actor: isolated any Actor) async {
        hop.deliverQueued(endingJob: true)
    }

    /// Delivers the queued changes in order, one at a time (a handler may
    /// make changes that queue more, or are delivered synchronously after
    /// what is still queued). Runs on the actor: as the scheduled job
    /// (`endingJob`, which ends the job when the queue is empty), or before a
    /// same-actor change. Drops the queue once the relation ended or either
    /// side died.
    @inlinable
    func deliverQueued(endingJob: Bool) {
        while let change = state.withLock({ $0.next(endingJob: endingJob, hasPending: hasPending) }) {
            guard let (listener, root) = _hopRecipients(relation: state.withLock { $0.relation }, root: root) else {
                dropQueue(endingJob: endingJob)
                return
            }
            // unsafeDowncast: the relation's listener and object are the
            // ones this hop was made for.
            handler(unsafeDowncast(listener, to: Listener.self), unsafeDowncast(root, to: Root.self), change)
        }
    }

    /// Forgets every queued change (the relation delivers no more); ends
    /// the job if `endingJob`.
    @inlinable
    func dropQueue(endingJob: Bool) {
        let dropped = state.withLock { $0.removeAll(endingJob: endingJob, hasPending: hasPending) }
        _ = dropped  // released here, unlocked
    }
}

// MARK: - The hop's non-generic parts

/// The listener and the object of a hop's relation, if the relation is
/// still active and both are alive; otherwise `nil`, having ended the
/// relation of a dead listener (so its handler is released now).
@usableFromInline
func _hopRecipients(relation reference: _RelationReference?, root: _UnretainedReference) -> (AnyObject, AnyObject)? {
    guard let relation = reference?.load() else { return nil }
    guard relation.isLive else { return nil }
    guard let listener = relation.listener.load() else {
        relation.end()
        return nil
    }
    guard let root = root.load() else { return nil }
    return (listener, root)
}

/// Ends the relation `reference` refers to, if it is still there.
@usableFromInline
func _endRelation(_ reference: _RelationReference?) {
    reference?.load()?.end()
}

/// An unretained reference to `object`.
@usableFromInline
func _unretained(_ object: AnyObject) -> _UnretainedReference {
    _UnretainedReference(object)
}

/// The object `reference` refers to, unless it died.
@usableFromInline
func _load(_ reference: _UnretainedReference) -> AnyObject? {
    reference.load()
}

/// The actor `reference` refers to, unless it died.
@usableFromInline
func _liveActor(_ reference: _UnretainedReference) -> (any Actor)? {
    // as!: the reference was made from an actor (`_Hop.init`).
    reference.load().map { $0 as! any Actor }
}
