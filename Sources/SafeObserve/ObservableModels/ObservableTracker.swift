import Synchronization

/// What a ``_ModelSentinel`` keeps of its trackers, whatever their types.
@usableFromInline
// @unchecked Sendable: adds one immutable stored property to `_AnyHop`.
class _AnyObservableTracker: _AnyHop, @unchecked Sendable {
    /// The actor it delivers on (`nil`: nonisolated), never kept alive. Its
    /// sentinel files it by that actor's identity, which is unique while
    /// this lives with the native probes (an unowned reference keeps the
    /// allocation) but not with the portable ones (see ``serves(_:)``).
    let isolation: _UnretainedReference?

    init(isolation: (any Actor)?, deliverQueued: @escaping @Sendable (_AnyHop, UInt64, Int) -> Void) {
        self.isolation = isolation.map { _UnretainedReference($0) }
        super.init(deliverQueued: deliverQueued)
    }

    /// Whether it delivers on `isolation`, which the caller holds: not if
    /// the actor it was made for died and another was made at its address.
    /// Safe under a lock (see ``_UnretainedReference/refers(to:)``).
    final func serves(_ isolation: (any Actor)?) -> Bool {
        guard let isolation else { return self.isolation == nil }
        return self.isolation?.refers(to: isolation) ?? false
    }

    /// Stops delivering: cancels what it can of its tracking, and lets go of
    /// the sentinel.
    @usableFromInline
    func stop() {}

    /// Whether it stopped (then a registration makes another).
    @usableFromInline
    var isStopped: Bool { false }
}

/// What the closure of one tracking holds: the model's sentinel, until a
/// newer tracking of the same tracker is installed.
///
/// The closure of every tracking installed in the model's registrar must
/// hold the sentinel, so that the model's death (its registrar releasing
/// them) releases it (see ``_ModelSentinel``). But a tracking the tracker
/// replaced without its having reported (a job re-tracked because a store
/// landed during its read) cannot be cancelled: Observation hands out a
/// tracking only when it reports. If its read dropped the last reference to
/// an object it read (a link replaced on another thread), Observation
/// installed it in that object's dead registrar storage, which it keeps for
/// good. So its hold lets go of the sentinel once a newer tracking's holds
/// it, and only Observation's storage stays.
///
/// It also names the tracker the tracking reports to, weakly, so that the
/// tracking's closure captures the hold alone (its whole context: nothing is
/// allocated for it).
@usableFromInline
// @unchecked Sendable: `sentinel` is set in `init`, then reached only under
// the lock of the tracker that made it; `generation` and `tracker` are set
// in `init` only.
final class _SentinelHold<Tracker: AnyObject>: @unchecked Sendable {
    @usableFromInline var sentinel: _ModelSentinel?
    /// The generation of its tracking (the newest one's hold keeps it).
    @usableFromInline let generation: UInt64
    /// The tracker its tracking reports to, unless it was released.
    @usableFromInline weak var tracker: Tracker?

    @usableFromInline
    init(_ sentinel: _ModelSentinel?, generation: UInt64, tracker: Tracker) {
        self.sentinel = sentinel
        self.generation = generation
        self.tracker = tracker
    }

    /// Lets go of the sentinel, returned to be released unlocked.
    func takeSentinel() -> _ModelSentinel? {
        defer { sentinel = nil }
        return sentinel
    }
}

/// A thread making a change to what an ``_ObservableTracker`` reads, and the
/// generation of a tracking that saw its `willSet` (outside the generic
/// tracker, so that its dictionary's metadata is not looked up per tracker).
@usableFromInline
struct _ChangeKey: Hashable {
    @usableFromInline let thread: UInt
    @usableFromInline let generation: UInt64

    @inlinable
    init(thread: UInt, generation: UInt64) {
        self.thread = thread
        self.generation = generation
    }
}

/// What a report to an ``_ObservableTracker`` was, by the `willSet`s seen on
/// its thread.
@usableFromInline
enum _ChangeEnd {
    /// A change whose `willSet` a tracking saw.
    case paired
    /// A change whose `willSet` no tracking saw: it began before the
    /// first tracking was installed, so its old value is unknown, and a
    /// value read at another thread's `willSet` may come after its store.
    case unpaired
    /// A change this thread reported already, reported to another
    /// tracking: no change.
    case reportedAlready
}

/// Delivers the changes of one key path of one `@Observable` model to the
/// relations registered on it from one isolation (an actor, or none).
///
/// One tracking at a time is installed in the registrars of what the key
/// path reads. When it reports a change (on the mutating thread), the
/// tracker schedules one job on its isolation (see
/// ``_ObservableTrackerStateMachine``): on an actor, through that executor's
/// ``_Mailbox`` (which never keeps the actor alive); nonisolated, as a task
/// on the global executor. The job reads the key path again, tracked (so a
/// chain whose link was replaced follows the new link), cancels the
/// tracking that reported, and tells each relation the value it was told
/// last (or read when it registered; for a value that is not trivial, the
/// value read when the changes began, see ``keepsValues``) and the value
/// now; when only the
/// property the key path names reported, on a model of exactly `Root`, it
/// reads untracked and the installed tracking stays (see
/// ``_ObservableTrackerStateMachine``). Changes made while a job is waiting
/// are one delivery.
///
/// Held by its model's sentinel, so it lives as long as the relations'
/// channel; it holds no relation, listener, model or actor alive.
@usableFromInline
// @unchecked Sendable: `state` is reached only under its lock; `keyPath`,
// `model` and `mailbox` are immutable; Values are read and handed to
// handlers only on the tracker's isolation (the job, or a registration
// made there).
final class _ObservableTracker<Root: AnyObject, Value>: _AnyObservableTracker, @unchecked Sendable {
    // The paths run at each change (the report and the job) are inlinable,
    // so that they are specialized where the relation is registered (the
    // tracker is made there, with the closures of ``Code``):
    // unspecialized, each looked up the metadata of its generic types again,
    // about a sixth of a delivery's instructions.

    @usableFromInline
    struct Entry {
        @usableFromInline let relation: _RelationReference
        /// Tells this entry from one of a relation that ended and was
        /// freed at the same address (the portable probes' weak references
        /// do not keep the allocation).
        @usableFromInline let id: UInt64
        /// What the relation was told last, or read when it registered. A
        /// value that may hold references is kept only until the next job
        /// (see ``_ObservableTracker/keepsValues``): `nil` otherwise, and
        /// the job's baseline is then ``State/pendingOld``.
        /// (Spelled `Optional<Value>`, which has no implicit `nil` to
        /// destroy when the initializer sets it.)
        @usableFromInline var last: Optional<Value>
        /// Told nothing until its `.initial` call returned: a job skips it
        /// meanwhile (see ``release(_:)``).
        @usableFromInline var isHeld: Bool
        /// A job skipped it while it was held.
        @usableFromInline var wasSkipped = false
        /// Delivers its `.initial`, which is the next job's to deliver (it
        /// was registered off the tracker's actor): then released.
        @usableFromInline var initialInJob: (@Sendable (AnyObject, Root, ObservedChange<Value>) -> Void)?

        /// Keeps `value` as `last` if `keepsValue`. Inlined, and `last`
        /// set case by case: an `Optional<Value>` temporary costs a
        /// metadata lookup per registration in unspecialized code (row 107).
        @inline(__always)
        init(
            relation: _RelationReference, id: UInt64, value: Value, keepsValue: Bool, isHeld: Bool,
            initialInJob: (@Sendable (AnyObject, Root, ObservedChange<Value>) -> Void)?
        ) {
            self.relation = relation
            self.id = id
            if keepsValue { self.last = value } else { self.last = nil }
            self.isHeld = isHeld
            self.initialInJob = initialInJob
        }
    }

    @usableFromInline
    struct State {
        @usableFromInline var machine = _ObservableTrackerStateMachine()
        @usableFromInline var entries: ContiguousArray<Entry> = []
        /// The entry count at which registration next removes ended
        /// entries: twice the count left by the last removal, so that
        /// removal costs O(1) amortized per registration.
        var removalThreshold = 16
        /// The next entry's `id`.
        var nextEntryID: UInt64 = 0
        /// The value the last tracked read returned (before-the-store
        /// tracking only: what a verification compares with). A value that
        /// may hold references is kept only for the verifications after its
        /// job (see ``lastReadJob``).
        @usableFromInline var lastRead: Value?
        /// The job that set ``lastRead``: its verifications clear it when
        /// they end, unless a later job set it.
        @usableFromInline var lastReadJob: UInt64 = 0
        /// The verifications of ``lastReadJob`` ended: the verification job
        /// that finds no change lets go of ``lastRead`` (a value that may
        /// hold references only).
        @usableFromInline var lastReadExpires = false
        /// A value that may hold references only (see
        /// ``_ObservableTracker/keepsValues``): the value before the changes
        /// no job has read yet, read at the first one's `willSet` (or the
        /// value a job told, when a change is known to be coming), kept
        /// until the next job: the old value of the entries that keep none.
        @usableFromInline var pendingOld: Value?
        /// ``pendingOld`` is the value a job told (not one read at a
        /// `willSet`, which a change that no tracking saw begin may have
        /// overtaken: see ``_ChangeEnd/unpaired``).
        @usableFromInline var pendingOldWasTold = false
        /// The changes begun and not yet reported (a `willSet` seen, its
        /// `didSet` not yet), by the thread making the change (which calls
        /// both) and the generation of the tracking that saw the `willSet`:
        /// while one is open, a report is bound to come, so a job that ends
        /// keeps the value it told as the next one's baseline. A tracking
        /// cancelled meanwhile, or installed during a change, leaves a count
        /// unpaired: a job that keeps its value for an open change drops it,
        /// and resets the counts, if no job began a while later (see
        /// ``_ObservableTracker/dropKeptValuesLater()``).
        @usableFromInline var openChanges: [_ChangeKey: Int] = [:]
        /// The threads that reported a change since their last `willSet`:
        /// a report on one with no change open is the same change's, to
        /// another tracking of this tracker (installed during the change).
        @usableFromInline var reportingThreads: Set<UInt> = []

        /// A change reported whose `willSet` no tracking saw, with no
        /// baseline told since: it began before the first tracking was
        /// installed. Its old value is unknown (and a value read at another
        /// thread's `willSet` may have been read after its store), so the
        /// next job tells the entries that keep none no old value (rather
        /// than a later baseline).
        @usableFromInline var hasUnpairedChange = false

        /// Whether a registration keeps the value it read (one that may hold
        /// references) until the next job: a change began since the last
        /// job, or (before the store) the last job's verifications run, a
        /// job being bound to come (or the verifications' end asks for one).
        @usableFromInline var keepsEntryValues: Bool {
            pendingOld != nil || hasOpenChanges || (!_ObservationTrackingLayer.reportsAfterTheStore && lastRead != nil)
        }

        /// Takes the value entry `index` kept (one that may hold references)
        /// out of it, for the caller to release unlocked.
        @usableFromInline
        mutating func takeKeptValue(at index: Int) -> Value? {
            defer { entries[index].last = nil }
            return entries[index].last
        }

        /// Takes the values kept by the entries from `index` on that are not
        /// held into `values`, for the caller to release unlocked.
        @usableFromInline
        mutating func takeKeptValues(from index: Int, into values: inout ContiguousArray<Value>) {
            for index in index..<entries.count where !entries[index].isHeld {
                if let kept = takeKeptValue(at: index) { values.append(kept) }
            }
        }

        /// Entry `index` lets go of the value it kept, unless a job may be
        /// bound to come (see ``_ObservableTracker/keepsValues``); the value,
        /// for the caller to release unlocked.
        mutating func letGoOfValueUnlessAJobMayCome(at index: Int) -> Value? {
            guard machine.phase == .idle, !keepsEntryValues else { return nil }
            return takeKeptValue(at: index)
        }

        /// Whether a change began and was not reported yet.
        @usableFromInline var hasOpenChanges: Bool { openChanges.values.contains { $0 > 0 } }

        /// A change begins on `thread`: a tracking of generation
        /// `generation` saw its `willSet`.
        @inlinable
        mutating func changeBegins(on thread: UInt, generation: UInt64) {
            openChanges[_ChangeKey(thread: thread, generation: generation), default: 0] += 1
            if !reportingThreads.isEmpty { reportingThreads.remove(thread) }
        }

        /// A tracking of generation `generation` reported a change made on
        /// `thread`: which change it was.
        @inlinable
        mutating func changeEnds(on thread: UInt, generation: UInt64) -> _ChangeEnd {
            let (reported, _) = reportingThreads.insert(thread)
            let key = _ChangeKey(thread: thread, generation: generation)
            if let open = openChanges[key], open > 0 {
                openChanges[key] = open - 1
                return .paired
            }
            // Its `willSet` reached another tracking only (cancelled since,
            // or installed during the change).
            if let other = openChanges.first(where: { $0.key.thread == thread && $0.value > 0 }) {
                openChanges[other.key] = other.value - 1
                return .paired
            }
            return reported ? .unpaired : .reportedAlready
        }

        /// A `willSet` read of the value before a change, begun when the
        /// job count was `stamp`, returned `value`: the baseline of the next
        /// job, unless one is known already, or a job began since (which
        /// told a later value, and keeps it as this change's baseline: this
        /// change is open at its end). The first read filed is the one: each
        /// thread that read files before its own store, so the first filed
        /// was read before any store of a thread whose `willSet` found no
        /// baseline, and any other thread's store finds one. What it does
        /// not keep, for the caller to release unlocked.
        @usableFromInline
        mutating func fileOldRead(_ value: Value?, stamp: UInt64) -> Value? {
            guard let value, machine.phase != .stopped, stamp == machine.deliveriesBegun, pendingOld == nil else {
                return value
            }
            pendingOld = value
            pendingOldWasTold = false
            return nil
        }

        /// The first key path instance a report named that equals
        /// ``_ObservableTracker/keyPath``; set once (see
        /// ``_ObservableTracker/equalReportedKeyPathAddress``).
        var equalReportedKeyPath: AnyKeyPath?
        /// The hold of the newest tracking installed; weak, as the closures
        /// that hold it must be all that keeps the sentinel (see
        /// ``_SentinelHold``).
        weak var installedHold: _SentinelHold<_ObservableTracker>?
    }

    /// Whether the tracker keeps the values it told (or read at a
    /// registration) from one change to the next, as the old value of the
    /// next change: only a value that holds no reference a user's object can
    /// be reached by (a trivial value, `String`, arrays of them: see
    /// ``keepsReferenceFreeValues``). Any other value may refer to the model
    /// or the listener (`\.parent`,
    /// `\.root`, a value holding `self`), and a value kept from a change to
    /// the next would keep them alive: the model's registrar holds the
    /// trackings' closures, which hold the sentinel, which holds the
    /// tracker. So such a value is kept only from a change to the job that
    /// tells it: the value before a change is read at its `willSet`, on the
    /// mutating thread (see ``captureOld()``).
    @inlinable
    var keepsValues: Bool { _isPOD(Value.self) || keepsReferenceFreeValues }

    /// A value that is not trivial but holds no reference that can reach a
    /// user's object (`String`, an array of them, see
    /// `_holdsNoUserReferences(_:)`): kept like a trivial one.
    @usableFromInline let keepsReferenceFreeValues: Bool

    @usableFromInline let keyPath: KeyPath<Root, Value>
    /// Whether the key path's read is the model's own class's getter of one
    /// property (a single component, on a model of exactly `Root`): a
    /// report of that property leaves what it reads unchanged, so the
    /// installed tracking stays. An `@Observable` stored property's getter
    /// tracks itself alone.
    @usableFromInline let readsOnlyItself: Bool
    @usableFromInline let model: _UnretainedReference
    /// The executor's mailbox; `nil` for a nonisolated tracker.
    let mailbox: _Mailbox?
    @usableFromInline weak var sentinel: _ModelSentinel?
    @usableFromInline let state = _Mutex(State())

    /// The address of the state's `equalReportedKeyPath` once set (0
    /// before): a report names its key path by an instance of
    /// Observation's, which then matches by identity instead of `==`.
    /// Relaxed: an instance the reporter holds at that address is the kept
    /// one, which never dies before the tracker, so no other object can
    /// have its address.
    @usableFromInline let equalReportedKeyPathAddress = Atomic<UInt>(0)

    /// Where its sentinel files it.
    let key: _ModelSentinel.TrackerKey

    /// What a tracker of this type runs at each change, as the code
    /// specialized where this is called (a registration passes it to the
    /// tracker it makes): its job, and the tracked read of its first
    /// registration (whose tracking may stay installed for good).
    @usableFromInline
    struct Code: Sendable {
        @usableFromInline let job: @Sendable (_AnyHop, UInt64, Int) -> Void
        @usableFromInline let track: @Sendable (_ObservableTracker, Root, UInt64) -> Value

        @inlinable
        init() {
            job = { hop, _, _ in
                // unsafeDowncast: the mailbox files this tracker only.
                unsafeDowncast(hop, to: _ObservableTracker<Root, Value>.self).deliver()
            }
            track = { tracker, model, generation in tracker.track(model, generation: generation) }
        }
    }

    /// The tracked read of the first registration (see ``Code``).
    let trackFirst: @Sendable (_ObservableTracker, Root, UInt64) -> Value

    @usableFromInline
    init(
        model: Root, keyPath: KeyPath<Root, Value>, isolation: (any Actor)?, sentinel: _ModelSentinel, code: Code
    ) {
        key = _ModelSentinel.TrackerKey(
            isolation: isolation.map { ObjectIdentifier($0) }, type: ObjectIdentifier(Self.self))
        self.keyPath = keyPath
        readsOnlyItself = type(of: model) == Root.self && _ObservationTrackingLayer.reportsAfterTheStore
        self.model = _UnretainedReference(model)
        keepsReferenceFreeValues = !_isPOD(Value.self) && _holdsNoUserReferences(Value.self)
        mailbox = isolation.map { _Mailbox.of($0) }
        self.sentinel = sentinel
        trackFirst = code.track
        super.init(isolation: isolation, deliverQueued: code.job)
    }

    // MARK: Registration

    /// Adds `relation` (active, just registered on the tracker's isolation)
    /// and returns the value it starts from; `nil` if the tracker stopped
    /// meanwhile (then the caller finds another). The tracker's first
    /// relation reads it tracked, which installs the first tracking.
    func add(
        _ relation: _Relation, to model: Root, isFirst: Bool, holding: Bool,
        initialInJob: (@Sendable (AnyObject, Root, ObservedChange<Value>) -> Void)? = nil
    ) -> Value? {
        let value: Value
        // The jobs begun so far, and whether one runs.
        let before: (begun: UInt64, isDelivering: Bool)
        if isFirst {
            let generation: UInt64
            (generation, before) = state.withLock { state -> (UInt64, (begun: UInt64, isDelivering: Bool)) in
                (state.machine.firstTracking(), (state.machine.deliveriesBegun, state.machine.isDelivering))
            }
            value = trackFirst(self, model, generation)
        } else {
            before = state.withLock { state -> (begun: UInt64, isDelivering: Bool) in
                (state.machine.deliveriesBegun, state.machine.isDelivering)
            }
            value = model[keyPath: keyPath]
        }
        let filed = state.withLock { state -> (removesEnded: Bool, metAJob: Bool, id: UInt64)? in
            guard state.machine.phase != .stopped else { return nil }
            // Before the store: what verifications compare with (kept for
            // theirs only, for a value that may hold references).
            if isFirst, !_ObservationTrackingLayer.reportsAfterTheStore {
                state.lastRead = value
                state.lastReadJob = state.machine.deliveriesBegun
            }
            state.nextEntryID &+= 1
            let metAJob =
                before.isDelivering || state.machine.isDelivering || state.machine.deliveriesBegun != before.begun
            // A value that may hold references is kept while a job may be
            // bound to come only (see `keepsValues`): the entry is held
            // during `.initial`, a change began since the last job, or the
            // read below may find a difference (a job ran since the read,
            // or the first tracking was installed after it); the entry
            // lets go of it below otherwise. Then the next change's
            // `willSet` reads the baseline.
            let keeps = keepsValues || holding || isFirst || metAJob || state.keepsEntryValues
            state.entries.append(
                Entry(
                    relation: _RelationReference(relation), id: state.nextEntryID, value: value, keepsValue: keeps,
                    isHeld: holding, initialInJob: initialInJob))
            return (state.entries.count >= state.removalThreshold, metAJob, state.nextEntryID)
        }
        guard let (removesEnded, metAJob, entryID) = filed else { return nil }
        // Before the store, a change that began before the first tracking
        // was installed, and landed after the read below, reports to
        // nothing: verified as after a delivery.
        if isFirst, !_ObservationTrackingLayer.reportsAfterTheStore { scheduleVerifications() }
        // A job that ran between the read of `value` and the filing took
        // its entries without this one, so told it nothing, though it may
        // have read a value stored after `value` (and left the tracking
        // armed past that change): if the key path reads otherwise now, a
        // job runs (again) and tells it. Read unlocked: it may run user
        // code. With no job meanwhile, a change stored since the read
        // reported to the tracking, and the job it scheduled tells it.
        // The first relation's read installed the first tracking, after
        // the read: a change stored in between reported to nothing, so the
        // key path is read again now that the tracking is installed.
        // On a difference after the first read, the job also tracks again:
        // the first tracking may follow a link replaced in between.
        let differs = (metAJob || isFirst) && !_isSameValue(model[keyPath: keyPath], value) && !readsAnew(model)
        // The job that tells the difference tells it from `value`, which
        // the entry kept; with none, it lets go of it.
        if !differs, !holding, !keepsValues { letGoOfValue(ofEntry: entryID) }
        if isFirst, differs {
            if state.withLock({ $0.machine.firstReadChangedAfterTracking() }) { schedule() }
        } else if initialInJob != nil || differs, state.withLock({ $0.machine.redeliver() }) {
            schedule()
        }
        // Bounded: the ended relations go whenever the entries doubled.
        if removesEnded { removeEnded(from: state.withLock { $0.entries }) }
        return value
    }

    /// The entry `id` lets go of the value it kept (one that may hold
    /// references), unless a job may be bound to come.
    func letGoOfValue(ofEntry id: UInt64) {
        let (released, dropsLater) = state.withLock { state -> (Value?, Bool) in
            // A change began and was not reported: kept for its job, or
            // for a while (its count may be left unpaired).
            let dropsLater = state.machine.phase == .idle && state.hasOpenChanges
            guard let index = state.entries.lastIndex(where: { $0.id == id }) else { return (nil, dropsLater) }
            return (state.letGoOfValueUnlessAJobMayCome(at: index), dropsLater)
        }
        _ = released  // released unlocked
        if dropsLater { dropKeptValuesLater() }
    }

    /// The `.initial` call of `relation` (added held) returned: jobs tell
    /// it changes from now on, and one runs if a job skipped it meanwhile.
    func release(_ relation: _Relation) {
        let address = Unmanaged.passUnretained(relation).toOpaque()
        let (schedules, released) = state.withLock { state -> (Bool, Value?) in
            // From the end: it was added last, but for registrations made
            // meanwhile.
            guard let index = state.entries.lastIndex(where: { $0.relation.reference.address == address }) else {
                return (false, nil)
            }
            state.entries[index].isHeld = false
            if state.entries[index].wasSkipped { return (state.machine.redeliver(), nil) }
            // With no job bound to come, a value that may hold references
            // is not kept (see `keepsValues`).
            guard !keepsValues else { return (false, nil) }
            return (false, state.letGoOfValueUnlessAJobMayCome(at: index))
        }
        _ = released  // released unlocked
        if schedules { schedule() }
    }

    /// Removes the entries of `entries` (a snapshot) whose relation ended.
    /// Probed unlocked; the removed values are released unlocked too.
    @usableFromInline
    func removeEnded(from entries: ContiguousArray<Entry>) {
        // A loop, not a key path: a key path into a generic `Entry` is
        // instantiated (its generic arguments demangled) at every use.
        var ended = Set<UInt64>()
        for entry in entries where entry.relation.load()?.isActive != true {
            ended.insert(entry.id)
        }
        guard !ended.isEmpty else {
            state.withLock { $0.removalThreshold = max(16, 2 * $0.entries.count) }
            return
        }
        let removed = state.withLock { state -> ContiguousArray<Entry> in
            var removed: ContiguousArray<Entry> = []
            // A running job matches its snapshot to the entries by index:
            // it removes them once it ended (a registration made by one
            // of its handlers, or from another thread, comes here).
            guard !state.machine.isDelivering else { return removed }
            state.entries.removeAll { entry in
                guard ended.contains(entry.id) else { return false }
                removed.append(entry)
                return true
            }
            state.removalThreshold = max(16, 2 * state.entries.count)
            return removed
        }
        _ = removed
    }

    /// Reads the key path with a tracking of generation `generation`, whose
    /// reports reach this tracker.
    @inlinable
    func track(_ model: Root, generation: UInt64) -> Value {
        let keyPath = keyPath
        let hold = _SentinelHold(sentinel, generation: generation, tracker: self)
        var willChange: (@Sendable () -> Void)?
        if !keepsValues { willChange = { [hold] in hold.tracker?.captureOld(generation: hold.generation) } }
        let value = _ObservationTrackingLayer.track(
            { model[keyPath: keyPath] }, willChange: willChange,
            changed: { [hold] fired in
                guard let tracker = hold.tracker else { return fired.cancel() }
                tracker.changed(fired: fired, hold: hold, keepsReads: tracker.reportsItself(fired))
            })
        installed(hold)
        return value
    }

    /// A change begins on this thread (before its store): reads the value
    /// before it, the old value of the next job, unless one is known
    /// already or a job runs (its end keeps the value it told). Only for a
    /// value that may hold references (see ``keepsValues``); any other is
    /// kept from job to job instead. Counted as open until its report on
    /// the same thread (see ``State/changeEnds(on:generation:)``).
    ///
    /// The read runs the key path's getters on the mutating thread, inside
    /// the mutating call: the price of keeping nothing between changes.
    @usableFromInline
    func captureOld(generation: UInt64) {
        let thread = _currentThreadID()
        let stamp = state.withLock { state -> UInt64? in
            guard state.machine.phase != .stopped else { return nil }
            state.changeBegins(on: thread, generation: generation)
            // A job that runs keeps the value it tells as this change's
            // baseline (this change is open at its end, see `deliver()`).
            guard state.pendingOld == nil, !state.machine.isDelivering else { return nil }
            // Before the store: while the last job's verifications run, the
            // value it told is the baseline (a store that landed after its
            // read reported to nothing, and is told from that value).
            if !_ObservationTrackingLayer.reportsAfterTheStore, let lastRead = state.lastRead {
                state.pendingOld = lastRead
                state.pendingOldWasTold = true
                return nil
            }
            return state.machine.deliveriesBegun
        }
        guard let stamp else { return }
        // unsafeDowncast: the model this tracker was made for.
        let value: Value? = model.load().map { model in unsafeDowncast(model, to: Root.self)[keyPath: keyPath] }
        let unfiled = state.withLock { $0.fileOldRead(value, stamp: stamp) }
        _ = unfiled  // released unlocked
    }

    /// The tracking of `hold` is installed: the older one's hold lets go
    /// of the sentinel (or this one's does, if a newer one is installed
    /// already). The older tracking may stay installed until it reports,
    /// or for good in the storage of a model that its read dropped (see
    /// ``_SentinelHold``); the newest holds the sentinel for both.
    @usableFromInline
    func installed(_ hold: _SentinelHold<_ObservableTracker>) {
        let released = state.withLock { state -> _ModelSentinel? in
            if let newest = state.installedHold, newest.generation > hold.generation {
                return hold.takeSentinel()
            }
            defer { state.installedHold = hold }
            return state.installedHold?.takeSentinel()
        }
        // Unlocked: the job or the registration holds it too, but the
        // sentinel's deinit ends relations.
        _ = released
    }

    /// Whether `fired` reported the key path itself, and its read reads
    /// nothing else (see ``readsOnlyItself``): then the job may keep the
    /// tracking installed.
    @inlinable
    func reportsItself(_ fired: borrowing _FiredTracking) -> Bool {
        guard readsOnlyItself, let changed = fired.changedKeyPath else { return false }
        if equalReportedKeyPathAddress.load(ordering: .relaxed) == UInt(bitPattern: ObjectIdentifier(changed)) {
            return true
        }
        return reportsItselfSlowly(changed)
    }

    /// ``reportsItself(_:)`` for a key path instance not compared yet:
    /// compared with `==` (about 400 instructions), and remembered if equal.
    @usableFromInline
    func reportsItselfSlowly(_ changed: AnyKeyPath) -> Bool {
        guard changed === keyPath || changed == keyPath else { return false }
        // Another equal instance is kept already (a generic model's key
        // path may be formed anew at each store): no lock.
        guard equalReportedKeyPathAddress.load(ordering: .relaxed) == 0 else { return true }
        state.withLock { state in
            guard state.equalReportedKeyPath == nil else { return }
            state.equalReportedKeyPath = changed
            equalReportedKeyPathAddress.store(UInt(bitPattern: ObjectIdentifier(changed)), ordering: .relaxed)
        }
        return true
    }

    // MARK: Reports and the job

    /// A tracking reported a change, on the mutating thread.
    ///
    /// A one-shot tracking (before the store) dropped its closure, which
    /// may have been all that held the sentinel: the job keeps it until it
    /// re-tracks. A continuous one (after the store) stays installed until
    /// the job cancels it, so the model's registrar still holds the
    /// sentinel: kept by nothing else, it dies with the model and ends the
    /// relations at once, whatever the job waits for; unless a burst's
    /// change cancelled it early (see ``_ObservableTrackerStateMachine``):
    /// then the job keeps the sentinel, and the model's death watch ends
    /// the relations.
    @inlinable
    func changed(fired: _FiredTracking, hold: _SentinelHold<_ObservableTracker>, keepsReads: Bool) {
        let generation = hold.generation
        let thread = keepsValues ? 0 : _currentThreadID()
        let action = state.withLock { state -> _ObservableTrackerStateMachine.ChangedAction in
            if !keepsValues {
                switch state.changeEnds(on: thread, generation: generation) {
                case .paired:
                    break
                case .reportedAlready:
                    // Scheduled its job already.
                    return state.machine.phase == .stopped ? .cancel : .none
                case .unpaired:
                    // No baseline, unless a job told one since (or, running,
                    // keeps one at its end): a value read at a `willSet`
                    // may have been read after this change's store.
                    if _ObservationTrackingLayer.reportsAfterTheStore, !state.machine.isDelivering,
                        state.pendingOld == nil || !state.pendingOldWasTold
                    {
                        state.hasUnpairedChange = true
                    }
                }
            }
            return state.machine.changed(
                generation: generation, tracking: fired, sentinel: hold.sentinel, keepsReads: keepsReads,
                cancelsInBursts: keepsValues)
        }
        switch action {
        case .none: break
        case .schedule: schedule()
        case .cancel: fired.cancel()
        }
    }

    @usableFromInline
    func schedule() {
        if let mailbox {
            let (_, schedules) = mailbox.state.withLock { $0.post(self) }
            if schedules { mailbox.schedule() }
        } else {
            Task { self.deliver() }
        }
    }

    /// Whether the key path reads a new value at each read, with nothing
    /// stored: a value compared by identity (neither trivial nor
    /// `Equatable`) that a computed property makes anew, such as an array of
    /// class instances. Then a read that differs from an earlier one tells
    /// no change (a report does): reads the key path twice, unlocked.
    @usableFromInline
    func readsAnew(_ model: Root) -> Bool {
        guard !_isPOD(Value.self), !(Value.self is any Equatable.Type) else { return false }
        return !_hasSameBits(model[keyPath: keyPath], model[keyPath: keyPath])
    }

    /// The job, on the tracker's isolation.
    @inlinable
    func deliver() {
        // `taken`: a value that may hold references only (see
        // `keepsValues`).
        guard
            let ((cancel, generation, verifiesOnly, reported), taken, unpaired) = state.withLock({
                state -> (
                    (cancel: [_FiredTracking], generation: UInt64?, verifiesOnly: Bool, reported: Bool), Value?, Bool
                )? in
                guard let begun = state.machine.beginDelivery() else { return nil }
                guard !keepsValues else { return (begun, nil, false) }
                defer {
                    state.pendingOld = nil
                    state.hasUnpairedChange = false
                }
                return (begun, state.pendingOld, state.hasUnpairedChange)
            })
        else { return }
        // unsafeDowncast: the model this tracker was made for.
        guard let model = model.load().map({ unsafeDowncast($0, to: Root.self) }) else {
            for tracking in cancel { tracking.cancel() }
            return stop()
        }
        // Held for the job: cancelling the tracking that reported may drop
        // the last closure that holds it, when the key path now reads
        // nothing Observation tracks (see the end of the job).
        var heldSentinel = sentinel
        var entries = state.withLock { $0.entries }
        var anyActive = false
        for entry in entries where _isActive(entry.relation) {
            anyActive = true
            break
        }
        if !anyActive {
            if retireUnlessRegistered(since: entries.count, cancel: cancel) { return }
            // A registration filed its relation since the snapshot: the job
            // goes on, for it.
            entries = state.withLock { $0.entries }
        }
        // Where an entry keeps no value: what the key path read before the
        // changes this job tells, or (a verification) what the last job told.
        // A baseline read after an unpaired change is not its old value.
        var old = unpaired ? nil : taken
        // Before the store, a change's `willSet` read is dropped when a job
        // began between the read and its filing: the baseline is then the
        // value the last job told, while its verifications keep it.
        if old == nil, !verifiesOnly, !keepsValues, !_ObservationTrackingLayer.reportsAfterTheStore {
            old = state.withLock { $0.lastRead }
        }
        if verifiesOnly {
            // Compared unlocked: `==` is the value type's code.
            let lastRead = state.withLock { $0.lastRead }
            // A value made anew at each read verifies nothing (reports tell
            // its changes); nor does one that differs at every read, past a
            // bound (see `rereadFoundChange()`).
            let same = lastRead.map { _isSameValue(model[keyPath: keyPath], $0) } ?? false
            let anew = lastRead != nil && !same && readsAnew(model)
            if lastRead != nil, same || anew || !state.withLock({ $0.machine.rereadFoundChange() }) {
                var keptAnew: ContiguousArray<Value> = []
                let (reschedule, released, expired) = state.withLock { state in
                    // A change began meanwhile: `old` is still its baseline.
                    if !keepsValues, state.pendingOld == nil, old != nil { swap(&state.pendingOld, &old) }
                    var expired: Value?
                    // The last verification: a value that may hold
                    // references is let go of, after a job tells the
                    // registrations made meanwhile (they kept theirs), or
                    // at once if it is made anew at each read (no job
                    // could tell them apart from a change).
                    if state.lastReadExpires {
                        if !anew, state.entries.contains(where: { !$0.isHeld && $0.last != nil }) {
                            _ = state.machine.redeliver()
                        } else {
                            state.lastReadExpires = false
                            swap(&expired, &state.lastRead)
                            if anew { state.takeKeptValues(from: 0, into: &keptAnew) }
                        }
                    }
                    let (reschedule, released) = state.machine.endDelivery()
                    return (reschedule, released, expired)
                }
                _ = (released, expired, keptAnew)
                if reschedule { schedule() }  // a report came meanwhile
                return
            }
            if old == nil { old = lastRead }
        }
        // Untracked when the installed tracking stays (see
        // ``_ObservableTrackerStateMachine``): a change stored from here on
        // reports to it, and the job runs again.
        let value = generation.map { track(model, generation: $0) } ?? model[keyPath: keyPath]
        // After the next tracking is installed: a change made in between
        // reported to these, and the job runs again.
        for tracking in cancel { tracking.cancel() }
        // But those follow what the key path read before (or were cancelled
        // by a burst): a store between the read and the installation to a
        // link or branch read only now reported to nothing, so the key path
        // is read again, and on a difference the job runs again and tracks
        // again (unlocked: `==` is the value type's code).
        let readChanged = generation != nil && !_isSameValue(model[keyPath: keyPath], value) && !readsAnew(model)
        if readChanged { state.withLock { $0.machine.readChangedAfterTracking() } }
        // Whether an entry's relation ended: then they are removed after.
        var sawEnded = false
        // Whether an entry was told its `.initial` (it is cleared after).
        var toldInitial = false
        for entry in entries where !entry.isHeld {
            guard let relation = _load(entry.relation), _isActive(relation) else {
                sawEnded = true
                continue
            }
            // The same value is no change (a change stored after the last
            // job read it was read by that job). With no baseline (a value
            // that may hold references), no change began since the last job,
            // unless one reported whose `willSet` came before its tracking
            // was installed: then it is told with no old value.
            let baseline = entry.last ?? old
            guard
                entry.initialInJob != nil
                    || baseline.map({ !_isSameValue(value, $0) }) ?? (reported && !keepsValues)
            else { continue }
            guard let listener = _listenerOrEnd(relation) else {
                sawEnded = true
                continue
            }
            if let initial = entry.initialInJob {
                toldInitial = true
                initial(listener, model, ObservedChange(newValue: value, oldValue: nil, isInitial: true))
            } else {
                withUnsafePointer(to: ObservedChange(newValue: value, oldValue: baseline)) {
                    _deliverChange(relation, listener, model, UnsafeRawPointer($0))
                }
            }
            withExtendedLifetime(listener) {}
        }
        // Values entries no longer keep, released unlocked.
        var replacedLasts: ContiguousArray<Value> = []
        // Whether the job kept its value for a change not reported yet.
        var dropsLater = false
        let (reschedule, released, replacedValues) = state.withLock {
            state -> (Bool, _ModelSentinel?, (pendingOld: Value?, lastRead: Value?)) in
            // Nothing to release (trivial values, no `.initial` cleared) and
            // the entries unchanged since the snapshot (the same buffer):
            // dropping the snapshot frees nothing, and leaves them unique,
            // updated in place rather than copied.
            if _isPOD(Value.self), !toldInitial, !sawEnded, entries.count == state.entries.count,
                entries.withUnsafeBufferPointer({ $0.baseAddress })
                    == state.entries.withUnsafeBufferPointer({ $0.baseAddress })
            {
                entries = []
                var index = 0
                while index < state.entries.count {
                    defer { index += 1 }
                    if state.entries[index].isHeld {
                        state.entries[index].wasSkipped = true
                    } else {
                        state.entries[index].last = value
                    }
                }
                let (reschedule, released) = state.machine.endDelivery()
                if !_ObservationTrackingLayer.reportsAfterTheStore { state.lastRead = value }
                return (reschedule, released, (nil, nil))
            }
            // Entries only grow at the end meanwhile (registrations; ended
            // ones are removed only while no job runs, see `removeEnded`).
            // The values replaced stay in `entries` (a copy), released
            // after unlocking.
            var index = 0
            let count = min(entries.count, state.entries.count)
            while index < count {
                defer { index += 1 }
                // Held when the job began: told nothing, so nothing changes
                // for it; if released since, it is told in another run.
                if entries[index].isHeld {
                    if state.entries[index].isHeld {
                        state.entries[index].wasSkipped = true
                    } else {
                        state.machine.markDirty()
                    }
                    continue
                }
                if keepsValues {
                    state.entries[index].last = value
                } else if let kept = state.takeKeptValue(at: index) {
                    // Not kept (see `keepsValues`); released unlocked.
                    replacedLasts.append(kept)
                }
                state.entries[index].initialInJob = nil
            }
            // Registrations filed during this job read the key path before
            // its read, maybe a value it did not tell them (stored between
            // the two reads, reported to no tracking): the job runs again,
            // telling them from the value each kept. Others keep theirs
            // whatever comes (see `keepsValues`).
            if !keepsValues, state.entries.count > count,
                state.entries[count...].contains(where: { $0.last != nil })
            {
                state.machine.markDirty()
            }
            let (reschedule, released) = state.machine.endDelivery()
            // Replaced values, released unlocked.
            var replaced: (pendingOld: Value?, lastRead: Value?) = (nil, nil)
            if !keepsValues, state.machine.phase != .stopped {
                // The job runs again: the next job tells the changes from
                // the value this one told. A change began and was not
                // reported yet (its store may have landed before or after
                // this job's read, its report may reach a tracking replaced
                // since): the same, but only for a while (see
                // `dropKeptValues(ifNoJobBegunSince:)`).
                if reschedule || readChanged || state.hasOpenChanges || state.pendingOld != nil {
                    replaced.pendingOld = state.pendingOld
                    state.pendingOld = value
                    state.pendingOldWasTold = true
                    dropsLater = !reschedule && !readChanged
                } else {
                    // No job is bound to come: registrations made during
                    // this one let go of what they kept.
                    state.takeKeptValues(from: count, into: &replacedLasts)
                }
                // Counts left unpaired (a tracking cancelled or installed
                // during a change) are reset by that drop; closed ones go.
                if state.openChanges.values.contains(0) {
                    state.openChanges = state.openChanges.filter { $0.value > 0 }
                }
            }
            if !_ObservationTrackingLayer.reportsAfterTheStore {
                replaced.lastRead = state.lastRead
                state.lastRead = value
                state.lastReadJob = state.machine.deliveriesBegun
                state.lastReadExpires = false
            }
            return (reschedule, released, replaced)
        }
        // Unlocked: the sentinel's deinit ends relations, and the replaced
        // values' may be anything.
        _ = (released, replacedValues, replacedLasts)
        if sawEnded { removeEnded(from: entries) }
        withExtendedLifetime(entries) {}
        if reschedule { schedule() }
        if dropsLater { dropKeptValuesLater() }
        if !_ObservationTrackingLayer.reportsAfterTheStore { scheduleVerifications() }
        // Only this job holds the sentinel: the key path read nothing
        // Observation tracks this time (a computed property that switched
        // to `@ObservationIgnored` state), so nothing can change it any
        // more. The relations were told this change; they end as the
        // sentinel goes, as a registration's do when it reads nothing
        // tracked.
        if heldSentinel != nil, isKnownUniquelyReferenced(&heldSentinel!) { warnReadsNothing() }
        heldSentinel = nil
    }

    /// The running job found every relation of its snapshot (of `count`
    /// entries) ended: stops and leaves its sentinel, cancelling `cancel`,
    /// unless a registration filed an entry since (it files under the same
    /// lock, and finds the tracker stopped otherwise). Whether it retired.
    @usableFromInline
    func retireUnlessRegistered(since count: Int, cancel: [_FiredTracking]) -> Bool {
        // Entries only grow while a job runs.
        guard stop(unlessEntriesDiffer: count) else { return false }
        for tracking in cancel { tracking.cancel() }
        sentinel?.forget(self, key: key)
        return true
    }

    /// Stops, and leaves its sentinel: no relation is left.
    @usableFromInline
    func retire() {
        stop()
        sentinel?.forget(self, key: key)
    }

    /// Warns that the key path came to read nothing Observation tracks.
    @usableFromInline
    func warnReadsNothing() {
        _Diagnostics.warn(
            "SafeObserve: \(keyPath) of the @Observable \(Root.self) read no tracked property after a change "
                + "(only `let` or @ObservationIgnored state): nothing can change it any more, so its relations end")
    }

    /// Before-the-store tracking only: a delivery that ran between a
    /// report and its store read the old value, and re-tracked too late for
    /// that store. So the key path is read again on the tracker's isolation
    /// a little after each delivery (see ``_ObservationTrackingLayer/verificationDelays``),
    /// and delivered if it changed.
    @usableFromInline
    func scheduleVerifications() {
        let job = state.withLock { $0.machine.deliveriesBegun }
        Task { [weak self] in
            let delays = _ObservationTrackingLayer.verificationDelays
            for (index, delay) in delays.enumerated() {
                try? await Task.sleep(for: delay)
                guard let self else { return }
                let schedules = state.withLock { state in
                    // The last: the job that finds no change lets go of a
                    // value that may hold references (see `keepsValues`).
                    if index == delays.count - 1, !keepsValues, state.lastReadJob == job {
                        state.lastReadExpires = true
                    }
                    return state.machine.verify()
                }
                if schedules { schedule() }
            }
        }
    }

    /// Schedules ``dropKeptValues(ifNoJobBegunSince:)`` a while from now
    /// (``_ObservationTrackingLayer/verificationDelays``' last).
    @usableFromInline
    func dropKeptValuesLater() {
        let job = state.withLock { $0.machine.deliveriesBegun }
        Task { [weak self] in
            try? await Task.sleep(for: _ObservationTrackingLayer.verificationDelays.last ?? .milliseconds(100))
            self?.dropKeptValues(ifNoJobBegunSince: job)
        }
    }

    /// A job kept the value it told for a change that had begun and not
    /// reported (see `deliver()`): if none has reported since (its report
    /// went to a tracking since replaced, or no tracking saw its
    /// `didSet`), the values kept are let go of, and the counts of changes
    /// begun are reset. A report that comes after is told with no old
    /// value.
    func dropKeptValues(ifNoJobBegunSince job: UInt64) {
        let released = state.withLock { state -> (Value?, ContiguousArray<Value>)? in
            guard state.machine.phase == .idle, state.machine.deliveriesBegun == job else { return nil }
            state.openChanges = [:]
            state.reportingThreads = []
            var lasts: ContiguousArray<Value> = []
            state.takeKeptValues(from: 0, into: &lasts)
            defer { state.pendingOld = nil }
            return (state.pendingOld, lasts)
        }
        _ = released  // released unlocked
    }

    @usableFromInline
    override var isStopped: Bool { state.withLock { $0.machine.phase == .stopped } }

    @usableFromInline
    override func stop() { _ = stop(unlessEntriesDiffer: nil) }

    /// Stops, unless `count` is given and the entries are not that many
    /// now; whether it stopped. The installed tracking's hold lets go of the
    /// sentinel too: that tracking may stay in registrars that outlive the
    /// model (a link that lives on, or one its read dropped, see
    /// ``_SentinelHold``).
    func stop(unlessEntriesDiffer count: Int?) -> Bool {
        let stopped = state.withLock {
            state -> (
                cancel: [_FiredTracking], released: _ModelSentinel?, installed: _ModelSentinel?, pendingOld: Value?,
                lastRead: Value?
            )? in
            if let count, state.entries.count != count { return nil }
            let (cancel, released) = state.machine.stop()
            defer {
                state.pendingOld = nil
                state.lastRead = nil
                state.openChanges = [:]
                state.reportingThreads = []
            }
            return (cancel, released, state.installedHold?.takeSentinel(), state.pendingOld, state.lastRead)
        }
        guard let stopped else { return false }
        for tracking in stopped.cancel { tracking.cancel() }
        // Unlocked: the sentinel's deinit ends relations, and the values'
        // may be anything.
        _ = (stopped.released, stopped.installed, stopped.pendingOld, stopped.lastRead)
        return true
    }

    /// The actor died: nothing can run on it; its relations end.
    override func actorDied() {
        let entries = state.withLock { $0.entries }
        retire()
        for entry in entries { entry.relation.load()?.end() }
    }
}

/// Whether `a` and `b` are the same value: the same bits (checked first, and
/// enough for most values), or equal for an `Equatable` type.
@inlinable
func _isSameValue<Value>(_ a: Value, _ b: Value) -> Bool {
    let sameBits = _hasSameBits(a, b)
    // A trivial value's bits are the value (the dynamic cast below costs
    // thousands of instructions per change).
    if sameBits || _isPOD(Value.self) { return sameBits }
    guard let a = a as? any Equatable else { return false }
    return a._isEqual(to: b)
}

/// Whether `a` and `b` have the same bits: the same value for a trivial
/// type, or copies of one stored value (the same references), without
/// calling any code of the type (so it may run under a lock, unlike `==`).
@inlinable
func _hasSameBits<Value>(_ a: Value, _ b: Value) -> Bool {
    withUnsafeBytes(of: a) { a in withUnsafeBytes(of: b) { b in a.elementsEqual(b) } }
}

extension Equatable {
    @usableFromInline
    func _isEqual(to other: Any) -> Bool {
        guard let other = other as? Self else { return false }
        return self == other
    }
}

// Non-generic steps of the tracker's inlinable job, on the relations it tells.

/// Whether the relation `reference` refers to is still there and active.
@usableFromInline
func _isActive(_ reference: _RelationReference) -> Bool {
    reference.load()?.isActive == true
}

/// Whether `relation` is active.
@usableFromInline
func _isActive(_ relation: _Relation) -> Bool { relation.isActive }

/// `relation`'s listener, or `nil` after ending the relation: it died.
@usableFromInline
func _listenerOrEnd(_ relation: _Relation) -> AnyObject? {
    guard let listener = relation.listener.load() else {
        relation.endForDeadListener()
        return nil
    }
    return listener
}

/// Tells `relation`'s handler the change at `change` (typed by the relation).
@usableFromInline
func _deliverChange(_ relation: _Relation, _ listener: AnyObject, _ object: AnyObject, _ change: UnsafeRawPointer) {
    relation.deliver(listener, object, change, .change, 0)
}
