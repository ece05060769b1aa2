import Synchronization

/// The part of a hop its mailbox calls (not generic).
@usableFromInline
// @unchecked Sendable: subclasses only (`_Hop`, which states its invariant).
class _AnyHop: @unchecked Sendable {
    /// On the executor: delivers the queued changes filed as `count`
    /// consecutive tickets from `firstTicket`, those still waiting. A closure
    /// rather than an override, formed where the relation is registered, so
    /// that it runs specialized code (a generic class's overrides are not).
    @usableFromInline let deliverQueued: @Sendable (_ hop: _AnyHop, _ firstTicket: UInt64, _ count: Int) -> Void
    /// Whether the relation is a notification observer's: while the job
    /// delivers its queued posts, a post made on the actor is nested in
    /// one of them (see ``_Mailbox/notifying(_:)``).
    @usableFromInline let deliversNotifications: Bool

    @usableFromInline
    init(
        deliversNotifications: Bool = false,
        deliverQueued: @escaping @Sendable (_ hop: _AnyHop, _ firstTicket: UInt64, _ count: Int) -> Void
    ) {
        self.deliversNotifications = deliversNotifications
        self.deliverQueued = deliverQueued
    }

    /// The actor died: the relation ends and the queue is dropped.
    @usableFromInline
    func actorDied() {}
}

/// Delivers the changes of one isolated relation (a handler registered from
/// an actor) on that actor.
///
/// A change made on the actor is delivered at once, synchronously, after any
/// change still queued for the relation. A change made elsewhere is queued
/// here and filed in the executor's ``_Mailbox``, whose job delivers every
/// relation's queued changes on the actor in the order they were made. When
/// its turn comes, a queued change is dropped if the relation ended, the
/// listener died or the object died meanwhile.
///
/// The hop is owned by the relation's delivery thunk, so it dies with the
/// relation, releasing the handler and its captures; the mailbox holds it
/// unretained. Neither the hop nor its queue keeps the listener, the object
/// or the actor alive: they are reached through liveness-probed references.
@usableFromInline
// @unchecked Sendable: `handler` is called only on the hop's actor (the
// caller checks `isOnActorAfterQueued()`, or is the mailbox's job on it);
// `queue` is reached only under the mailbox's lock; everything else is
// immutable or atomic.
final class _Hop<Listener: AnyObject, Root: AnyObject, Value>: _AnyHop, @unchecked Sendable {
    // The generic paths are inlinable, so that they are specialized where
    // the relation is registered: unspecialized, each would look up the
    // metadata of the queue's types at every change.

    /// The handler. Not Sendable: see above.
    @usableFromInline let handler: (Listener, Root, ObservedChange<Value>) -> Void
    /// Whether changes are queued (mirrors `queue`, written under the lock):
    /// the same-actor path reads it without locking.
    @usableFromInline let hasPending = Atomic<Bool>(false)
    /// The relation's options (what the thunk hands the handler of a change).
    @usableFromInline let options: ObservationOptions
    /// Whether the relation receives the new value alone (the usual case,
    /// built without testing each option).
    @usableFromInline let receivesNewValueOnly: Bool
    @usableFromInline let root: _UnretainedReference
    /// The actor's executor's deliveries.
    @usableFromInline let mailbox: _Mailbox
    /// The mailbox's lock and state (the same storage as `mailbox.state`),
    /// reached from here without a retain of the mailbox's storage.
    @usableFromInline let mailboxState: _Mutex<_Mailbox.State>
    /// The mailbox's executor and whether it is the main actor's, kept here
    /// too: the same-actor check reads them on every change made there.
    @usableFromInline let executor: UnownedSerialExecutor
    @usableFromInline let isMainActor: Bool
    /// The relation's queued changes.
    // nonisolated(unsafe), @exclusivity(unchecked): read and written only
    // under `mailbox.state`'s lock, which makes every access exclusive.
    @exclusivity(unchecked) @usableFromInline nonisolated(unsafe) var queue = Queue()

    /// A hop to `actor` for a relation on `root`; `deliversNotifications`
    /// for a notification observer's (see ``_AnyHop/deliversNotifications``).
    @inlinable
    convenience init(
        actor: any Actor, root: Root, options: ObservationOptions, deliversNotifications: Bool = false,
        handler: @escaping (Listener, Root, ObservedChange<Value>) -> Void
    ) {
        self.init(
            mailbox: _Mailbox.of(actor), root: root, options: options, deliversNotifications: deliversNotifications,
            handler: handler
        ) {
            hop, firstTicket, count in
            // unsafeDowncast: the mailbox calls this with this hop only.
            unsafeDowncast(hop, to: _Hop.self).deliverRun(from: firstTicket, count: count)
        }
    }

    @usableFromInline
    init(
        mailbox: _Mailbox, root: Root, options: ObservationOptions, deliversNotifications: Bool,
        handler: @escaping (Listener, Root, ObservedChange<Value>) -> Void,
        deliverQueued: @escaping @Sendable (_AnyHop, UInt64, Int) -> Void
    ) {
        self.mailbox = mailbox
        mailboxState = mailbox.state
        executor = mailbox.executor
        isMainActor = mailbox.isMainActor
        self.handler = handler
        self.options = options
        receivesNewValueOnly = options.intersection([.new, .old, .prior]) == .new
        self.root = _UnretainedReference(root)
        super.init(deliversNotifications: deliversNotifications, deliverQueued: deliverQueued)
    }

    /// Gives the hop its relation (from its token), which is checked before
    /// each queued delivery; changes queued before (made elsewhere while an
    /// actor listener was being registered from outside it) are filed now.
    @inlinable
    func attach(_ token: ObservationToken) {
        let schedule = mailboxState.withLock { queue.attach(token._relation, hop: self, mailbox: &$0) }
        if schedule { mailbox.schedule() }
    }

    // MARK: Delivery

    /// Whether this thread runs on the actor, having delivered what is still
    /// queued if so: the caller then delivers its change synchronously (the
    /// thunk's own typed call, as for a nonisolated handler); otherwise it
    /// queues it with ``enqueue(_:)``.
    /// Tells the handler `.initial`, on the actor, during registration: the
    /// value `read` returns, after dropping the changes it supersedes (see
    /// ``Queue/dropSuperseded(first:through:by:unsure:hasPending:)``), so that no change
    /// older than it follows it. Nothing when reading ended the relation.
    /// Out of line: inlined, it made the registration too large for the
    /// caller to inline, and so to specialize its handler's thunk (notify
    /// 1 observer went from 257 to 303 instructions).
    @inlinable @inline(never)
    func deliverInitial(to listener: Listener, _ root: Root, token: ObservationToken, read: () -> Value) {
        let queuedBefore = mailboxState.withLock { _ in queue.count }
        let (value, storedBefore, unsure) = _readAndNumberForInitial(token, read)
        // Reading ran user code (a computed property), which may have unobserved.
        guard token.isActive else { return }
        // A change numbered before the read, still on its way to this
        // relation, is skipped where it is made, or where it is queued if
        // it got past that (see ``Queue/dropSuperseded(first:through:by:unsure:hasPending:)``).
        _skipChanges(through: storedBefore, token)
        let dropped = mailboxState.withLock { _ in
            let dropped = queue.dropSuperseded(
                first: queuedBefore, through: storedBefore, by: value, unsure: unsure, hasPending: hasPending)
            // A change numbered after the read may have stored before it.
            if unsure { queue.keepBaseline(value, tellsOld: options.contains(.old), hasPending: hasPending) }
            return dropped
        }
        withExtendedLifetime(dropped) {}  // released unlocked
        handler(listener, root, ObservedChange(newValue: value, oldValue: nil, isInitial: true))
    }

    /// Queues `.initial`, before the hop is attached (registered off the
    /// actor): the value `read` returns goes in front of the changes queued
    /// since the relation was added, and supersedes those queued or stored
    /// before the read (see ``Queue/dropSuperseded(first:through:by:unsure:hasPending:)``),
    /// so that it is the first delivery on the actor and no older change
    /// follows it. Nothing when reading ended the relation. Out of line, as
    /// ``deliverInitial(to:_:token:read:)``.
    @inlinable @inline(never)
    func queueInitial(token: ObservationToken, read: () -> Value) {
        let queuedBefore = mailboxState.withLock { _ in queue.count }
        let (value, storedBefore, unsure) = _readAndNumberForInitial(token, read)
        // Reading ran user code (a computed property), which may have unobserved.
        guard token.isActive else { return }
        _skipChanges(through: storedBefore, token)
        let dropped = mailboxState.withLock { _ in
            let dropped = queue.dropSuperseded(
                first: queuedBefore, through: storedBefore, by: value, unsure: unsure, hasPending: hasPending)
            // A change numbered after the read may have stored before it.
            if unsure { queue.keepBaseline(value, tellsOld: options.contains(.old), hasPending: hasPending) }
            queue.prependUnfiled(
                ObservedChange(newValue: value, oldValue: nil, isInitial: true), hasPending: hasPending)
            return dropped
        }
        withExtendedLifetime(dropped) {}  // released unlocked
    }

    /// Whether this thread runs on the hop's actor.
    @inlinable
    var isOnActor: Bool {
        _isCurrentExecutor(executor, isMainActor: isMainActor) && (isMainActor || !mailbox.actorIsGone)
    }

    @inlinable
    func isOnActorAfterQueued() -> Bool {
        guard isOnActor else { return false }
        if hasPending.load(ordering: .acquiring) { deliverQueuedFirst() }
        return true
    }

    /// Whether this thread runs on the actor, having called `deliver` (the
    /// delivery of a post to this notification observer) if so; otherwise
    /// the caller queues the post with ``enqueue(_:)``.
    ///
    /// A post made on the actor while no notification handler runs there
    /// is delivered after what the observer still has queued, as a change
    /// is (``isOnActorAfterQueued()``). One made while a notification
    /// handler runs there (a post from inside a handler, whether its own
    /// post was made there or queued) is delivered at once, before what is
    /// queued, as when every post is made on the actor: so it reaches each
    /// observer before the outer post goes on, and a running handler is
    /// never re-entered with a queued post.
    @inlinable
    func isOnActorAfterNotifying(_ deliver: () -> Void) -> Bool {
        guard isOnActor else { return false }
        mailbox.notifying {
            if $0, hasPending.load(ordering: .acquiring) { deliverQueuedFirst() }
            deliver()
        }
        return true
    }

    /// Delivers what is queued before a same-actor change (out of line, so
    /// that the same-actor path stays small); the mailbox's entries for
    /// those changes are skipped when their turn comes.
    @inlinable @inline(never)
    func deliverQueuedFirst() {
        // The job's batch first, if it is this hop's (a handler it called
        // made this change): those changes are older than the queued ones.
        if mailbox.batch?.hop == ObjectIdentifier(self) {
            // The relation is loaded under the lock, and dropped after it.
            deliverBatch(relation: mailboxState.withLock { _ in queue.loadRelation() })
        }
        while deliverNext(ticket: nil) {}
    }

    /// Delivers the changes of the job's batch (this hop's) that no handler
    /// was told yet, in order, on the actor; `false` if the relation ended or
    /// a side died (the rest of the batch is dropped).
    @inlinable @discardableResult
    func deliverBatch(relation: _Relation?) -> Bool {
        while let batch = mailbox.batch, batch.next < batch.end {
            mailbox.batch!.next += 1
            // Each change checks both sides anew: a handler may have ended
            // the relation or dropped either side.
            guard let relation,
                let recipients = _hopRecipients(relation, root: root, checksChannel: deliversNotifications)
            else {
                mailbox.batch!.next = batch.end
                dropQueue()
                return false
            }
            // assumingMemoryBound: the batch is this hop's, so its changes are `Value`s.
            call(recipients, batch.changes.assumingMemoryBound(to: ObservedChange<Value>.self)[batch.next])
        }
        return true
    }

    /// Delivers what the relation receives of the change `change` points
    /// to, synchronously on the actor or queued from elsewhere: the thunk of
    /// a key-path relation.
    @inlinable
    func deliver(
        _ listener: AnyObject, _ root: AnyObject, _ change: UnsafeRawPointer, _ phase: _Phase, _ sequence: UInt64
    ) {
        guard isOnActor else { return enqueue(change, phase, sequence) }
        if hasPending.load(ordering: .acquiring) { return deliverBehindQueued(change, phase, sequence) }
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

    /// A change made on the actor while the relation has changes queued (or
    /// a batch being delivered): queued behind them, then delivered with
    /// them, in order. Queued rather than held in this frame, so that a
    /// change a handler makes meanwhile, which delivers what is queued
    /// first, delivers this one before its own (out of line, as below).
    ///
    /// A prior notification dropped with `.coalesced` (a change is waiting)
    /// leaves the queue for the change phase: that change merges into the
    /// waiting one, whose prior stands for both, and then delivers it.
    /// Delivering the waiting change now would leave this change to be
    /// delivered on its own, without its prior.
    @inlinable @inline(never)
    func deliverBehindQueued(_ change: UnsafeRawPointer, _ phase: _Phase, _ sequence: UInt64) {
        let kept = enqueue(_observedChange(options, change, phase, Value.self), sequence: sequence)
        if phase == .prior, !kept { return }
        deliverQueuedFirst()
    }

    /// Queues what the relation receives of the change `change` points to,
    /// numbered `sequence` (see ``_Deliver``), during its delivery (out of
    /// line, as above).
    @inlinable @inline(never)
    func enqueue(_ change: UnsafeRawPointer, _ phase: _Phase, _ sequence: UInt64) {
        enqueue(_observedChange(options, change, phase, Value.self), sequence: sequence)
    }

    /// Queues `change` and files it in the mailbox, which schedules its job
    /// if none is coming; `sequence` as in ``_Deliver``, given only during a
    /// delivery of the relation. Returns whether `change` was queued on its
    /// own (not merged into a waiting change, nor dropped). Inlined into
    /// its out-of-line callers: one call fewer for a change made elsewhere.
    @inlinable @inline(__always) @discardableResult
    func enqueue(_ change: ObservedChange<Value>, sequence: UInt64 = 0) -> Bool {
        let coalescing = options.contains(.coalesced)
        let (replaced, schedule, spent) = mailboxState.withLock {
            queue.enqueue(
                change, sequence: sequence, coalescing: coalescing, tellsOld: options.contains(.old),
                object: root.address, hop: self, mailbox: &$0, hasPending: hasPending)
        }
        let kept = replaced == nil
        // Released here, unlocked: a value's deinit may be user code.
        withExtendedLifetime((replaced, spent)) {}
        if schedule { mailbox.schedule() }
        return kept
    }

    /// On the executor, as the mailbox's job: delivers the queued changes
    /// filed as `count` consecutive tickets from `first` (those still
    /// waiting), taking up to 16 at a time under one lock and loading the
    /// relation's recipients once for them.
    @inlinable
    func deliverRun(from first: UInt64, count: Int) {
        // One change (a producer that waits for each delivery): there is no
        // rest of a batch for a nested change to deliver first, so none is
        // recorded.
        if count == 1 {
            deliverNext(ticket: first)
            return
        }
        var ticket = first
        var remaining = count
        withUnsafeTemporaryAllocation(of: ObservedChange<Value>.self, capacity: 16) { buffer in
            defer { mailbox.batch = nil }
            while remaining > 0 {
                // Taken out of the queue, the batch keeps `hasPending` set:
                // a change made on the actor by one of its handlers must
                // deliver the rest of it first.
                // The relation is loaded under the lock, and dropped after it.
                var skipped = 0
                let (taken, relation) = mailboxState.withLock { _ in
                    let taken = queue.take(
                        from: ticket, limit: remaining, into: buffer, skipped: &skipped, hasPending: hasPending)
                    return (taken, taken > 0 ? queue.loadRelation() : nil)
                }
                guard taken > 0 else { return }
                defer { buffer.baseAddress!.deinitialize(count: taken) }
                ticket &+= UInt64(skipped + taken)
                remaining -= skipped + taken
                mailbox.batch = _Mailbox._Batch(
                    hop: ObjectIdentifier(self), changes: UnsafeMutableRawPointer(buffer.baseAddress!), end: taken)
                guard deliverBatch(relation: relation) else { return }
                // The next `take` clears `hasPending` if nothing is queued; after
                // the run's last batch, this does.
                if remaining == 0 { mailboxState.withLock { _ in queue.endBatch(hasPending: hasPending) } }
            }
        }
    }

    /// Delivers the oldest queued change (only if it was filed as `ticket`,
    /// when given); whether one was delivered. Drops the queue once the
    /// relation ended or either side died.
    @inlinable @discardableResult
    func deliverNext(ticket: UInt64?) -> Bool {
        // The relation is loaded under the lock, and dropped after it.
        let next = mailboxState.withLock { _ in
            queue.next(ticket: ticket, hasPending: hasPending).map { ($0, queue.loadRelation()) }
        }
        guard let (change, relation) = next else { return false }
        guard let relation, let recipients = _hopRecipients(relation, root: root, checksChannel: deliversNotifications)
        else {
            dropQueue()
            return false
        }
        call(recipients, change)
        return true
    }

    /// Calls the handler with `recipients` (see ``_hopRecipients(_:root:checksChannel:)``),
    /// whose references it then releases: they are passed as they are held,
    /// with no copy of either (a strong pair was retained again for the call).
    @inlinable @inline(__always)
    func call(_ recipients: _HopRecipients, _ change: ObservedChange<Value>) {
        defer { recipients.release() }
        recipients.listener._withUnsafeGuaranteedRef { listener in
            recipients.root._withUnsafeGuaranteedRef { root in
                // unsafeDowncast: the relation's listener and object are the
                // ones this hop was made for.
                handler(unsafeDowncast(listener, to: Listener.self), unsafeDowncast(root, to: Root.self), change)
            }
        }
    }

    /// The actor died: nothing can run there any more, so the relation ends
    /// and the queue is dropped.
    @usableFromInline
    override func actorDied() {
        _endRelation(mailboxState.withLock { _ in queue.relation })
        dropQueue()
    }

    /// Forgets every queued change (the relation delivers no more); their
    /// mailbox entries are skipped when their turn comes.
    @inlinable
    func dropQueue() {
        let dropped = mailboxState.withLock { _ in queue.removeAll(hasPending: hasPending) }
        withExtendedLifetime(dropped) {}  // released here, unlocked
    }
}

// MARK: - The hop's non-generic parts

/// The listener and the object of a hop's relation, if the relation is
/// still active and both are alive; otherwise `nil`, having ended the
/// relation of a dead listener or object (so its handler is released now).
///
/// A key-path relation's object is the hop's `root`, so loading it is the
/// liveness check of ``_Relation/isLive`` too (without probing the channel's
/// reference to it again); a notification observer's `root` is the sender
/// (or the hub), so `checksChannel` checks the hub as well.
@usableFromInline
func _hopRecipients(_ relation: _Relation, root: _UnretainedReference, checksChannel: Bool) -> _HopRecipients? {
    guard checksChannel ? relation.isLive : relation.isActive else { return nil }
    guard let listener = relation.listener.load() else {
        relation.end()
        return nil
    }
    guard let root = root.load() else {
        relation.end()
        return nil
    }
    return _HopRecipients(listener: .passRetained(listener), root: .passRetained(root))
}

/// A hop relation's listener and object, each retained once for the
/// handler's call (``_Hop/call(_:_:)`` releases them).
@usableFromInline
struct _HopRecipients {
    @usableFromInline let listener: Unmanaged<AnyObject>
    @usableFromInline let root: Unmanaged<AnyObject>

    @inlinable
    func release() {
        listener.release()
        root.release()
    }
}

/// The relation `reference` refers to, unless it ended and was released.
@usableFromInline
func _load(_ reference: _RelationReference?) -> _Relation? {
    reference?.load()
}

/// The number of the newest change the relation at `address` was told
/// (``_Relation/lastChange``). The caller holds that relation (it runs
/// inside one of its deliveries), so it is reached through its address
/// without a retain: safe under a lock.
@inlinable
func _lastChange(ofRelationAt address: UnsafeMutableRawPointer) -> UInt64 {
    // Unmanaged, unretained: the caller holds the relation (above).
    Unmanaged<_Relation>.fromOpaque(address)._withUnsafeGuaranteedRef {
        $0.lastChange.load(ordering: .relaxed)
    }
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

// MARK: - Actor listeners' handlers

// An actor listener's handler takes the listener `isolated`; SafeObserve
// stores it without the marker and calls it only on the listener's executor
// (a hop, or a tracker, delivers there). unsafeBitCast: an `isolated`
// parameter changes no calling convention (`Actor.assumeIsolated` relies on
// the same).

/// `handler`, to be called only on `Listener`'s executor.
@inlinable
func _droppingIsolation<Listener: Actor, Root, Value>(
    _ handler: @escaping @Sendable (isolated Listener, Root, ObservedChange<Value>) -> Void
) -> @Sendable (Listener, Root, ObservedChange<Value>) -> Void {
    unsafeBitCast(handler, to: (@Sendable (Listener, Root, ObservedChange<Value>) -> Void).self)
}

/// `handler`, to be called only on `Listener`'s executor.
@inlinable
func _droppingIsolation<Listener: Actor, Payload>(
    _ handler: @escaping @Sendable (isolated Listener, PostedNotification<Payload>) -> Void
) -> @Sendable (Listener, PostedNotification<Payload>) -> Void {
    unsafeBitCast(handler, to: (@Sendable (Listener, PostedNotification<Payload>) -> Void).self)
}

/// The value `read` returns, read for an `.initial` and numbered as a
/// change of the property of `token`'s relation would be
/// (``_Channel/readAndNumber(_:)``): every change numbered before it stored
/// a value it includes (the number ``_skipChanges(through:_:)`` takes);
/// and whether a change numbered after it may have stored before it, a
/// registrar's mutation being under way (see
/// ``_Channel/readAndNumberForInitial(_:)``). Without a channel (a derived
/// key path), a plain read, 0 and `false`.
@inlinable
func _readAndNumberForInitial<Value>(_ token: ObservationToken, _ read: () -> Value) -> (Value, UInt64, Bool) {
    guard let channel = _channel(of: token) else { return (read(), 0, false) }
    return channel.readAndNumberForInitial(read)
}

/// The channel of `token`'s relation, if it observes one property.
@usableFromInline
func _channel(of token: ObservationToken) -> _Channel? {
    _load(token._relation)?.channel
}

/// Marks `token`'s relation as told the changes numbered up to `count`: a
/// change stored before an `.initial` read, whose delivery had not reached
/// the relation yet, is skipped as older than what it was told.
@usableFromInline
func _skipChanges(through count: UInt64, _ token: ObservationToken) {
    guard let relation = _load(token._relation), relation.ordersChanges else { return }
    _ = relation.advanceLastChange(to: count)
}
