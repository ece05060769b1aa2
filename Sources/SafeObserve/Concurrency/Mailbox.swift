import Synchronization

/// The deliveries waiting for one executor, for every relation isolated to
/// an actor on it, in the order the changes were made.
///
/// A change made off a handler's actor is queued on its relation's hop
/// (``_Hop``) and filed here; one job at a time delivers the mailbox on the
/// executor, entry by entry. So the relations isolated to one actor are told
/// a change in registration order, and each relation its changes in order,
/// whichever hop queued first. A change made on the actor itself is
/// delivered at once, after what its own relation still has queued; the
/// entries it overtook are skipped (their tickets no longer match).
///
/// Nothing here keeps a listener, a handler or an actor alive:
/// - entries hold their hops unretained, so a relation that ends releases
///   its handler at once, whatever is queued;
/// - the main actor's job holds nothing;
/// - an actor on a custom executor is never held: the job runs on an actor
///   of the mailbox's own (``_ExecutorProxy``) that shares that executor and
///   retains only the executor. The mailbox is the executor's, whichever of
///   its actors live: one of them dying ends nothing;
/// - a default actor is its own executor, and the Swift runtime requires an
///   actor to outlive the jobs enqueued on it: a job holds such an actor
///   while it waits for it and while it delivers one batch (the changes
///   queued when it set off), then lets go and checks the actor is still
///   alive before the next batch.
@usableFromInline
// @unchecked Sendable: `state` (and each hop's queue, which only this
// mailbox's lock guards) is reached only under the lock; everything else is
// immutable.
final class _Mailbox: @unchecked Sendable {
    /// The executor, for the same-actor check. Its identity is unique while
    /// `proxy` keeps a custom executor alive, or while a default actor is
    /// alive; the native probes also keep a dead default actor's
    /// allocation, the portable ones do not (see ``of(_:)``).
    @usableFromInline let executor: UnownedSerialExecutor
    @usableFromInline let isMainActor: Bool
    /// The default actor that is this executor (`nil` for the main actor and
    /// a custom executor), never kept alive.
    let actor: _UnretainedReference?
    /// The job's actor for a custom executor.
    let proxy: _ExecutorProxy?
    @usableFromInline let state = _Mutex(State())
    /// The run the job is delivering, if any: its hop, and the changes it
    /// took out of the hop's queue that no handler was told yet (`next` up
    /// to `end` of `changes`, typed by the hop). A change made on the actor
    /// by one of their handlers delivers them first, as it would were they
    /// still queued (``_Hop/deliverQueuedFirst()``).
    // nonisolated(unsafe): touched only on the executor, by the job and the
    // handlers it calls (one job at a time).
    @exclusivity(unchecked) @usableFromInline nonisolated(unsafe) var batch: _Batch?

    /// How many notification handlers run on the executor (posts to
    /// observers isolated to it being delivered, by the job or by a post
    /// made there), to tell a post made there from inside one of them
    /// (``_Hop/isOnActorAfterNotifying(_:)``). Touched only on the
    /// executor, like `batch`; atomic (relaxed) so as to need no unsafe
    /// access.
    @usableFromInline let notificationHandlers = Atomic<Int>(0)

    @usableFromInline
    struct _Batch {
        @usableFromInline let hop: ObjectIdentifier
        @usableFromInline let changes: UnsafeMutableRawPointer
        @usableFromInline var next: Int
        @usableFromInline let end: Int

        @inlinable
        init(hop: ObjectIdentifier, changes: UnsafeMutableRawPointer, end: Int) {
            self.hop = hop
            self.changes = changes
            next = 0
            self.end = end
        }
    }

    /// The main actor's mailbox.
    @usableFromInline
    static let main = _Mailbox(mainActor: ())

    private init(mainActor: Void) {
        executor = MainActor.shared.unownedExecutor
        isMainActor = true
        actor = nil
        proxy = nil
    }

    private init(actor: any Actor, proxy: _ExecutorProxy?) {
        executor = actor.unownedExecutor
        isMainActor = false
        self.actor = proxy == nil ? _UnretainedReference(actor) : nil
        self.proxy = proxy
    }

    deinit {
        // Unfiled only if still filed: a weak reference to a deinitializing
        // object reads nil, and a live one is a newer mailbox filed under
        // the same identity (see `of(_:)`).
        if !isMainActor {
            Self.table.withLock { table in
                let key = Self.identity(of: executor)
                if let entry = table[key], entry.mailbox == nil { table.removeValue(forKey: key) }
            }
        }
    }

    /// Whether this is still the mailbox of the executor whose identity it
    /// is filed under: a custom executor's always (its proxy keeps the
    /// executor alive); a default actor's while that actor lives (then
    /// every actor with that executor shares it). A dead default actor's
    /// mailbox lives on while relations isolated to it do, and with the
    /// portable probes a new actor may be made at its address. Probes the
    /// actor (a weak load with the portable probes): call it unlocked.
    private var isCurrent: Bool {
        proxy != nil || !actor.unsafelyUnwrapped.isGone
    }

    /// Whether the default actor that is this executor died. Then the
    /// executor running, if its identity matches, is another actor's: with
    /// the portable probes, a new actor may be made at the dead one's
    /// address (the native probes keep the allocation, so never).
    @usableFromInline
    var actorIsGone: Bool {
        #if SAFEOBSERVE_PORTABLE_PROBES || canImport(ObjectiveC)
            actor?.isGone ?? false
        #else
            false
        #endif
    }

    /// Runs `body` on the executor as a notification handler (see
    /// `notificationHandlers`), telling it whether none was running.
    @inlinable
    func notifying<Result>(_ body: (_ isOutermost: Bool) -> Result) -> Result {
        let running = notificationHandlers.load(ordering: .relaxed)
        notificationHandlers.store(running &+ 1, ordering: .relaxed)
        defer { notificationHandlers.store(running, ordering: .relaxed) }
        return body(running == 0)
    }

    // MARK: Finding the mailbox of an actor

    private struct WeakMailbox {
        weak var mailbox: _Mailbox?
    }

    /// The mailboxes of executors other than the main actor's, by identity.
    private static let table = _Mutex<[UInt: WeakMailbox]>([:])

    private static func identity(of executor: UnownedSerialExecutor) -> UInt {
        // unsafeBitCast: an `UnownedSerialExecutor` is the runtime's two-word
        // `SerialExecutorRef`, identity first; used as a key only.
        UInt(bitPattern: unsafeBitCast(executor, to: (UnsafeMutableRawPointer?, UInt).self).0)
    }

    /// The mailbox of `actor`'s executor, made on first use.
    ///
    /// - Complexity: O(1) expected: one lock and one hash look-up (none for
    ///   the main actor).
    @usableFromInline
    static func of(_ actor: any Actor) -> _Mailbox {
        if actor === MainActor.shared { return main }
        let executor = actor.unownedExecutor
        let key = identity(of: executor)
        let found = table.withLock { $0[key]?.mailbox }
        if let found, found.isCurrent { return found }
        // Made unlocked (the executor's `asUnownedSerialExecutor` is user
        // code), then filed unless another thread filed one meanwhile; a
        // dead actor's mailbox filed under the same identity is replaced.
        let made = _Mailbox(actor: actor, proxy: _ExecutorProxy.sharing(executor, of: actor))
        // A mailbox filed meanwhile is a live actor's (the stale one found
        // above is replaced); checked unlocked, as a weak load must be.
        return table.withLock { table in
            if let filed = table[key]?.mailbox, filed !== found { return filed }
            table[key] = WeakMailbox(mailbox: made)
            return made
        }
    }

    // MARK: The job

    /// Schedules the job that delivers the mailbox on its executor. It never
    /// keeps a hop alive, and an actor only as described above.
    @usableFromInline
    func schedule() {
        if isMainActor {
            Task { @MainActor in _Mailbox.main.deliverBatch() }
        } else if let proxy {
            Task { await proxy.deliver(self) }
        } else {
            Task { await self.deliverInBatches() }
        }
    }

    /// How many changes queued after a main-actor or custom-executor job
    /// started it may still deliver. A change made elsewhere right after the
    /// previous one was delivered (a producer that waits for each delivery)
    /// is then delivered by the same job, not one job per change; and the
    /// job still ends after bounded work, whatever the producers do.
    static let lateArrivals: UInt64 = 64

    /// How many queued deliveries one job takes at most, counted from the
    /// oldest waiting one. What was queued when a job started grows with
    /// how long the previous job ran while changes kept coming faster than
    /// the executor delivered them (attack round 11, F2: an empty main-actor
    /// job waited more than 3 s behind a flood); so the actor's other work
    /// waits for at most this many deliveries, whatever the producers do.
    static let deliveriesPerJob: UInt64 = 1_024

    /// The main actor's job, and a custom executor's: delivers the entries
    /// queued when it started and at most ``lateArrivals`` more (at most
    /// ``deliveriesPerJob`` in all), then, if more wait, schedules another
    /// job for them behind the executor's other work. So changes made
    /// elsewhere faster than the executor delivers them never hold it for
    /// more than that many deliveries.
    func deliverBatch() {
        if deliver(lateArrivals: Self.lateArrivals) { schedule() }
    }

    /// A default actor's job: one batch at a time, each after checking the
    /// actor is still alive, and without holding it in between.
    private func deliverInBatches() async {
        while true {
            // unwrapped: only a default actor's mailbox delivers in batches.
            guard let actor = _liveActor(actor.unsafelyUnwrapped) else { return actorDied() }
            guard await Self.deliverBatch(of: self, on: actor) else { return }
        }
    }

    private static func deliverBatch(of mailbox: _Mailbox, on actor: isolated any Actor) async -> Bool {
        mailbox.deliver(lateArrivals: 0)
    }

    /// Delivers the waiting entries in order, on the executor: those queued
    /// before the first entry is taken, and at most `lateArrivals` more, but
    /// no more than ``deliveriesPerJob``; whether entries remain (then the
    /// job goes on).
    func deliver(lateArrivals: UInt64) -> Bool {
        // Set under the lock that takes the first entry.
        var bound: UInt64? = nil
        while true {
            let next = state.withLock { state in
                if bound == nil {
                    bound = Swift.min(
                        state.nextTicket &+ lateArrivals, state.oldestTicket &+ Self.deliveriesPerJob)
                }
                return state.next(before: bound)
            }
            // Consumed: the hop it loaded is moved out, not copied.
            switch consume next {
            case .run(let hop, let firstTicket, let count):
                guard let hop else { continue }
                // unsafeDowncast: entries are only filed by hops.
                let anyHop = unsafeDowncast(hop, to: _AnyHop.self)
                if anyHop.deliversNotifications {
                    notifying { _ in anyHop.deliverQueued(anyHop, firstTicket, count) }
                } else {
                    anyHop.deliverQueued(anyHop, firstTicket, count)
                }
            case .ended:
                return false
            case .bounded:
                return true
            }
        }
    }

    /// The actor died: nothing can run on it any more, so every relation
    /// with a delivery waiting ends, and the entries go.
    func actorDied() {
        let entries = state.withLock { $0.removeAll() }
        for entry in entries {
            // unsafeDowncast: entries are only filed by hops.
            guard let hop = entry.hop.load() else { continue }
            unsafeDowncast(hop, to: _AnyHop.self).actorDied()
        }
    }
}

/// An actor of SafeObserve's own that shares a custom executor: a job
/// isolated to it runs on that executor, serialized with the actor's own
/// jobs, while keeping only the executor alive, never the actor.
final actor _ExecutorProxy {
    /// Retained: the job must not outlive the executor it is enqueued on.
    private let executor: any SerialExecutor
    private let identity: UnownedSerialExecutor

    nonisolated var unownedExecutor: UnownedSerialExecutor { identity }

    private init(executor: any SerialExecutor, identity: UnownedSerialExecutor) {
        self.executor = executor
        self.identity = identity
    }

    /// A proxy for `actor`'s executor `executor`, if it is a custom one (a
    /// default actor is its own executor, which no other actor can share).
    static func sharing(_ executor: UnownedSerialExecutor, of actor: any Actor) -> _ExecutorProxy? {
        guard #available(macOS 26.4, iOS 26.4, watchOS 26.4, tvOS 26.4, visionOS 26.4, *) else { return nil }
        guard let serialExecutor = executor.asSerialExecutor(), serialExecutor as AnyObject !== actor else {
            return nil
        }
        return _ExecutorProxy(executor: serialExecutor, identity: executor)
    }

    /// The mailbox's job, on the executor: delivers a batch (see
    /// ``_Mailbox/deliverBatch()``). The executor is alive, so it can run
    /// whichever of its actors died: each relation checks its own listener.
    func deliver(_ mailbox: _Mailbox) {
        mailbox.deliverBatch()
    }
}
