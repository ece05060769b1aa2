/// When an ``_ObservableTracker`` delivers: the transitions between a change
/// reported by Observation (on the mutating thread) and the delivery job
/// (on the tracker's isolation). Each returns what to do, which the caller
/// does after unlocking.
///
/// ```
///             changed                 job begins
///   idle ───────────────▶ scheduled ──────────────▶ delivering
///    ▲                        ▲                         │
///    │   job ends, clean      │   job ends, dirty       │
///    └────────────────────────┴─────────────────────────┘
///   stop() from any phase ──▶ stopped (a later report cancels its tracking)
/// ```
///
/// Every tracking the tracker installs gets a generation; a report names
/// its tracking's. The fired trackings are kept until the job has installed
/// the next one, then cancelled: a change made while the job re-tracks
/// fires the old tracking and marks the job dirty, so none is lost.
///
/// A job re-tracks only if a report may have changed what the key path
/// reads: a one-shot tracking (before the store) is gone once it fired; a
/// continuous one stays installed, and needs replacing only after a report
/// of a property other than the key path itself (a chain's link, a computed
/// property's input). Reports of the key path alone leave it installed.
///
/// A burst: a continuous tracking that reports while a job is already due
/// (scheduled, or running and due to run again) is cancelled at once, so
/// that the burst's further changes report to nothing (Observation's
/// report to an installed tracking costs several thousand instructions per
/// change). The machine keeps the model's sentinel meanwhile (the
/// tracking's closure held it); the next job re-tracks. Not for a tracker
/// that reads the old value at each change's `willSet` (a value that may
/// hold references, see ``_ObservableTracker/keepsValues``): a change
/// landing while the next tracking is installed must reach a tracking's
/// `willSet`, so one stays installed until the next is.
///
/// A job that installs a tracking reads the key path once more after the
/// installation: the trackings still installed cover what the key path
/// read before (none, after a burst), not what it reads now, so a store
/// between the job's read and the installation (to a new link, say)
/// reported to nothing. If the value changed, the job runs again and
/// tracks again (``readChangedAfterTracking()``). That, and a verification
/// that finds a change, are taken for changes up to ``maxRereadsInARow``
/// times with no report in between (``rereadFoundChange()``): a key path
/// whose reads differ with nothing stored (a computed property that returns
/// a random value) must not run jobs for ever.
@usableFromInline
struct _ObservableTrackerStateMachine {
    @usableFromInline
    enum Phase: Equatable {
        case idle
        case scheduled
        case delivering(dirty: Bool)
        case stopped
    }

    @usableFromInline private(set) var phase = Phase.idle

    /// The jobs begun so far (a registration compares it before its read
    /// and at its filing).
    @usableFromInline private(set) var deliveriesBegun: UInt64 = 0

    /// Whether a job runs (between ``beginDelivery()`` and ``endDelivery()``).
    @usableFromInline var isDelivering: Bool {
        if case .delivering = phase { return true }
        return false
    }
    /// The trackings that reported since the last job began, one per
    /// generation.
    private var fired: [(generation: UInt64, tracking: _FiredTracking)] = []
    /// The model's sentinel, from a report to the end of the job it
    /// scheduled: the fired tracking's closure may be all that held it, and
    /// a one-shot tracking drops its closure once it fired. A continuous
    /// tracking (after the store) keeps it in the model's registrar until
    /// the job cancels the tracking, so that the sentinel dies with the
    /// model (see ``_ModelSentinel``): it is kept here only once a burst
    /// cancelled that tracking early.
    private var keptSentinel: _ModelSentinel?
    /// The generation of the next tracking installed.
    private var nextGeneration: UInt64 = 1
    /// The generation of the tracking installed last.
    @usableFromInline private(set) var installedGeneration: UInt64 = 0
    /// Whether a report since the last job began may have changed what the
    /// key path reads (see the type's discussion).
    private var needsTracking = false
    /// Whether the scheduled job was asked for by ``verify()`` only (no
    /// tracking reported since the last delivery).
    private var verifiesOnly = false

    /// The generation filed last in ``fired``: a continuous tracking
    /// reports each change with the same one, which is then filed already
    /// (checked without scanning ``fired``).
    private var filedGeneration: UInt64 = 0
    /// The re-reads taken for changes in a row (``rereadFoundChange()``),
    /// with no report since.
    private var rereadsInARow = 0
    /// The bound on ``rereadsInARow``. A store between a job's read and its
    /// tracking's installation that a second job's window sees too is rare;
    /// a third, with no store reported meanwhile, is taken for reads that
    /// differ with nothing stored.
    @usableFromInline static let maxRereadsInARow = 2

    /// What the report does after unlocking. Trivial, with no payload: the
    /// caller holds the tracking that reported (an `ObservationTracking`,
    /// whose layout is resilient, so that a payload cost a value witness
    /// call per copy on every report).
    @usableFromInline
    enum ChangedAction {
        case none
        /// Schedule the delivery job.
        case schedule
        /// Cancel the tracking that reported: the tracker stopped, or a
        /// burst's change found a job already due.
        case cancel
    }

    /// The generation of the first tracking, installed by the tracker's
    /// first registration.
    @usableFromInline
    mutating func firstTracking() -> UInt64 {
        installedGeneration = nextGeneration
        nextGeneration &+= 1
        return installedGeneration
    }

    /// A tracking of generation `generation` reported a change; `keepsReads`
    /// says whether the job may keep it installed (a continuous tracking
    /// reporting the key path itself). `sentinel` is the model's, which the
    /// tracking's closure holds.
    @usableFromInline
    mutating func changed(
        generation: UInt64, tracking: borrowing _FiredTracking, sentinel: _ModelSentinel?, keepsReads: Bool,
        cancelsInBursts: Bool = true
    ) -> ChangedAction {
        let continuous = _ObservationTrackingLayer.reportsAfterTheStore
        rereadsInARow = 0
        if !keepsReads, phase != .stopped { needsTracking = true }
        switch phase {
        case .stopped:
            return .cancel
        case .idle:
            phase = .scheduled
            verifiesOnly = false
            file(generation, tracking)
            if !continuous { keptSentinel = keptSentinel ?? sentinel }
            return .schedule
        case .delivering(dirty: false):
            phase = .delivering(dirty: true)
            file(generation, tracking)
            if !continuous { keptSentinel = keptSentinel ?? sentinel }
            return .none
        case .scheduled, .delivering(dirty: true):
            if phase == .scheduled { verifiesOnly = false }
            file(generation, tracking)
            // Scheduled without a report (`verify()`, `redeliver()`), no
            // sentinel is kept yet; the tracking that reported, which held
            // it, is gone (one-shot) or cancelled now.
            keptSentinel = keptSentinel ?? sentinel
            guard continuous, cancelsInBursts else { return .none }
            // A burst: a job is due already.
            needsTracking = true
            return .cancel
        }
    }

    private mutating func file(_ generation: UInt64, _ tracking: borrowing _FiredTracking) {
        // A continuous tracking reports every change until cancelled: one
        // entry per tracking.
        guard generation != filedGeneration else { return }
        filedGeneration = generation
        if !fired.contains(where: { $0.generation == generation }) { fired.append((generation, copy tracking)) }
    }

    /// The job begins: the trackings to cancel once the job installed the
    /// next one (whose generation it takes), or `nil` if the tracker stopped.
    /// A relation held while its `.initial` call ran was released: a job
    /// tells it what it was not told, if one is not already due.
    @usableFromInline
    mutating func redeliver() -> Bool {
        switch phase {
        case .idle:
            phase = .scheduled
            return true
        case .delivering:
            phase = .delivering(dirty: true)
            return false
        case .scheduled:
            // The job scheduled tells every relation, not only checks.
            verifiesOnly = false
            return false
        case .stopped:
            return false
        }
    }

    /// The running job read the key path again once its tracking was
    /// installed, and the value had changed: a store landed between its
    /// read and the installation, which may have replaced what the key path
    /// reads (a chain's link, a computed property's branch) while the new
    /// tracking follows what the first read read. The job runs again, and
    /// tracks again, unless ``maxRereadsInARow`` jobs did so since the last
    /// report.
    @usableFromInline
    mutating func readChangedAfterTracking() {
        guard case .delivering = phase, rereadFoundChange() else { return }
        phase = .delivering(dirty: true)
        needsTracking = true
    }

    /// A job read the key path again (after installing its tracking, or to
    /// verify the last delivery's read) and found it changed, with no
    /// report: whether to take it for a change, which is so up to
    /// ``maxRereadsInARow`` times since the last report.
    @usableFromInline
    mutating func rereadFoundChange() -> Bool {
        guard rereadsInARow < Self.maxRereadsInARow else { return false }
        rereadsInARow += 1
        return true
    }

    /// The first registration read the key path again once its tracking
    /// was installed, and the value had changed: as in
    /// ``readChangedAfterTracking()``, that tracking may follow what the key
    /// path no longer reads, so a job runs, and tracks again. Whether to
    /// schedule it.
    @usableFromInline
    mutating func firstReadChangedAfterTracking() -> Bool {
        guard phase != .stopped else { return false }
        needsTracking = true
        return redeliver()
    }

    /// The running job skipped a relation released meanwhile: it runs
    /// again.
    @usableFromInline
    mutating func markDirty() {
        if case .delivering = phase { phase = .delivering(dirty: true) }
    }

    /// A job that checks whether a change was stored after the last
    /// delivery read the key path, with no report (the before-the-store
    /// tracking's race): scheduled if nothing else is.
    @usableFromInline
    mutating func verify() -> Bool {
        guard phase == .idle else { return false }
        phase = .scheduled
        verifiesOnly = true
        return true
    }

    /// The job begins: the trackings to cancel once the job read the key
    /// path, the generation of the tracking it installs for that read
    /// (`nil`: it reads untracked, the installed tracking stays; a job
    /// that installs one reads again after, see
    /// ``readChangedAfterTracking()``), whether it only verifies, and
    /// whether a tracking reported since the last job began; `nil` if the
    /// tracker stopped.
    @usableFromInline
    mutating func beginDelivery()
        -> (cancel: [_FiredTracking], generation: UInt64?, verifiesOnly: Bool, reported: Bool)?
    {
        guard phase == .scheduled else { return nil }
        let reported = !fired.isEmpty
        phase = .delivering(dirty: false)
        deliveriesBegun &+= 1
        defer {
            // Its buffer is kept: a report files into it without allocating.
            fired.removeAll(keepingCapacity: true)
            filedGeneration = 0
            verifiesOnly = false
            needsTracking = false
        }
        var cancel: [_FiredTracking] = []
        guard needsTracking || verifiesOnly else {
            // The installed tracking stays; older ones that reported go.
            for (generation, tracking) in fired where generation != installedGeneration { cancel.append(tracking) }
            return (cancel, nil, false, reported)
        }
        for (_, tracking) in fired { cancel.append(tracking) }
        installedGeneration = nextGeneration
        nextGeneration &+= 1
        return (cancel, installedGeneration, verifiesOnly, reported)
    }

    /// The job ends: whether to schedule another (a change came while it
    /// ran), and the sentinel it no longer keeps (released unlocked).
    @usableFromInline
    mutating func endDelivery() -> (reschedule: Bool, released: _ModelSentinel?) {
        switch phase {
        case .delivering(dirty: true):
            phase = .scheduled
            return (true, nil)
        case .delivering(dirty: false):
            phase = .idle
            defer { keptSentinel = nil }
            return (false, keptSentinel)
        default:
            return (false, nil)
        }
    }

    /// Stops for good: the trackings to cancel, and the sentinel it no
    /// longer keeps (both handled unlocked).
    @usableFromInline
    mutating func stop() -> (cancel: [_FiredTracking], released: _ModelSentinel?) {
        phase = .stopped
        defer {
            fired = []
            filedGeneration = 0
            keptSentinel = nil
        }
        return (fired.map { $0.tracking }, keptSentinel)
    }
}
