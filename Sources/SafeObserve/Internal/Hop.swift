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
/// relation, releasing the handler and its captures; a scheduled job holds it
/// weakly. Neither the hop nor a job keeps the listener, the object or the
/// actor alive: they are reached through liveness-probed references.
@usableFromInline
final class _Hop<Value>: @unchecked Sendable {
    // @unchecked Sendable: `handler` is called only on `actor` (the caller
    // checks `_isCurrentExecutor`, or is the job scheduled on it); `state` is
    // reached only under its lock; everything else is immutable or atomic.

    /// The handler's actor's executor, for the same-actor check. Its identity
    /// stays unique while `actorReference` keeps the actor's allocation.
    @usableFromInline let executor: UnownedSerialExecutor
    /// The handler, taking the listener and the object erased (the thunk that
    /// made the hop casts them back). Not Sendable: see above.
    @usableFromInline let handler: (AnyObject, AnyObject, ObservedChange<Value>) -> Void
    /// Whether changes are queued (mirrors `state`, written under its lock):
    /// the same-actor path reads it without locking.
    @usableFromInline let hasPending = Atomic<Bool>(false)

    private let coalesces: Bool
    private let listener: _UnretainedReference
    private let root: _UnretainedReference
    /// Keeps the actor's allocation (so `executor` never names another
    /// actor), never the actor itself.
    private let actorReference: _UnretainedReference
    // unowned(unsafe): read only while `actorReference.load()` holds the actor.
    private unowned(unsafe) let actor: any Actor
    private let isMainActor: Bool
    private let state = _Mutex(State())

    /// A hop to `actor` for the relation of `listener` on `root`.
    @usableFromInline
    init(
        actor: any Actor, listener: AnyObject, root: AnyObject, coalesces: Bool,
        handler: @escaping (AnyObject, AnyObject, ObservedChange<Value>) -> Void
    ) {
        executor = actor.unownedExecutor
        self.handler = handler
        self.coalesces = coalesces
        self.listener = _UnretainedReference(listener)
        self.root = _UnretainedReference(root)
        actorReference = _UnretainedReference(actor)
        self.actor = actor
        isMainActor = actor === MainActor.shared
    }

    /// Gives the hop its relation's token, which a job checks before each
    /// delivery. Called by the registration, on the actor, before any job can
    /// run there.
    @usableFromInline
    func attach(_ token: ObservationToken) {
        state.withLock { $0.token = token }
    }

    // MARK: Delivery

    /// Delivers `change` now if this thread runs on the actor (after what is
    /// queued), or queues it for the actor.
    @inlinable
    func deliver(_ listener: AnyObject, _ root: AnyObject, _ change: ObservedChange<Value>) {
        if _isCurrentExecutor(executor) {
            if hasPending.load(ordering: .acquiring) { deliverQueued(endingJob: false) }
            handler(listener, root, change)
        } else {
            enqueue(change)
        }
    }

    /// Queues `change` and, if no job is scheduled, schedules one.
    @usableFromInline
    func enqueue(_ change: ObservedChange<Value>) {
        let action = state.withLock { $0.enqueue(change, coalescing: coalesces, hasPending: hasPending) }
        switch action {
        case .none(let replaced):
            _ = replaced  // released here, unlocked: a value's deinit may be user code
        case .schedule:
            schedule()
        }
    }

    /// Schedules the job that delivers the queue on the actor. Nothing is
    /// retained until it runs but the job itself: it holds the hop and the
    /// actor weakly.
    private func schedule() {
        if isMainActor {
            // Enqueued on the main actor directly.
            Task { @MainActor [weak self] in self?.deliverQueued(endingJob: true) }
            return
        }
        guard let keptAlive = actorReference.load() else {
            // The actor died: nothing can run there any more.
            state.withLock { $0.token }?.invalidate()
            dropQueue(endingJob: true)
            return
        }
        let actor = self.actor
        _ = keptAlive
        Task { [weak self, weak actor] in
            guard let self, let actor else { return }
            await Self.deliverQueued(self, on: actor)
        }
    }

    private static func deliverQueued(_ hop: _Hop, on actor: isolated any Actor) async {
        hop.deliverQueued(endingJob: true)
    }

    /// Delivers the queued changes in order, one at a time (a handler may
    /// make changes that queue more, or are delivered synchronously after
    /// what is still queued). Runs on the actor: as the scheduled job
    /// (`endingJob`, which ends the job when the queue is empty), or before a
    /// same-actor change.
    @usableFromInline
    func deliverQueued(endingJob: Bool) {
        while let change = state.withLock({ $0.next(endingJob: endingJob, hasPending: hasPending) }) {
            guard let (token, listener, root) = recipients() else {
                dropQueue(endingJob: endingJob)
                return
            }
            _ = token
            handler(listener, root, change)
        }
    }

    /// The relation's token, listener and object, if the relation is still
    /// active and both are alive; otherwise `nil`, having ended the relation
    /// of a dead listener (so its handler is released now).
    private func recipients() -> (ObservationToken, AnyObject, AnyObject)? {
        guard let token = state.withLock({ $0.token }), token.isActive else { return nil }
        guard let listener = listener.load() else {
            token.invalidate()
            return nil
        }
        guard let root = root.load() else { return nil }
        return (token, listener, root)
    }

    /// Forgets every queued change (the relation delivers no more); ends
    /// the job if `endingJob`.
    private func dropQueue(endingJob: Bool) {
        let dropped = state.withLock { $0.removeAll(endingJob: endingJob, hasPending: hasPending) }
        _ = dropped  // released here, unlocked
    }

    // MARK: State machine

    /// The queue and whether a job is scheduled. Transitions never release a
    /// value under the lock: what they replace or drop is returned.
    struct State {
        /// Queued changes from `head` on; delivered slots are `nil`.
        var queue: ContiguousArray<ObservedChange<Value>?> = []
        var head = 0
        /// A job is scheduled, or running, and will deliver the queue.
        var isScheduled = false
        var token: ObservationToken?

        enum EnqueueAction {
            /// Nothing to do after unlocking but release `replaced`.
            case none(replaced: ObservedChange<Value>?)
            /// Schedule the job.
            case schedule
        }

        var isEmpty: Bool { head == queue.count }

        /// Queues `change`; with `coalescing`, merges it into a queued change
        /// instead (the first old value and the latest new value), and drops
        /// a prior notification while a change is queued (it already
        /// announced the merged change, or was not asked for).
        mutating func enqueue(
            _ change: ObservedChange<Value>, coalescing: Bool, hasPending: borrowing Atomic<Bool>
        ) -> EnqueueAction {
            if coalescing, !isEmpty {
                if change.isPrior { return .none(replaced: change) }
                let last = queue.count - 1
                if let queued = queue[last], !queued.isPrior {
                    queue[last] = ObservedChange(newValue: change.newValue, oldValue: queued.oldValue)
                    return .none(replaced: queued)
                }
            }
            queue.append(change)
            hasPending.store(true, ordering: .releasing)
            guard !isScheduled else { return .none(replaced: nil) }
            isScheduled = true
            return .schedule
        }

        /// The oldest queued change, moved out; `nil` when the queue is
        /// empty, which also ends the job if `endingJob`.
        mutating func next(endingJob: Bool, hasPending: borrowing Atomic<Bool>) -> ObservedChange<Value>? {
            guard !isEmpty else {
                if endingJob { isScheduled = false }
                return nil
            }
            let change = queue[head].take()
            head += 1
            if isEmpty {
                // Only `nil` slots are released here.
                queue.removeAll(keepingCapacity: queue.capacity <= 16)
                head = 0
                hasPending.store(false, ordering: .releasing)
            }
            return change
        }

        /// Empties the queue, returning what it held (to release unlocked);
        /// ends the job if `endingJob`.
        mutating func removeAll(
            endingJob: Bool, hasPending: borrowing Atomic<Bool>
        ) -> ContiguousArray<ObservedChange<Value>?> {
            defer {
                queue = []
                head = 0
                if endingJob { isScheduled = false }
                hasPending.store(false, ordering: .releasing)
            }
            return queue
        }
    }
}
