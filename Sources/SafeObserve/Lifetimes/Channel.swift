import Synchronization

/// The relations registered on one `@Observed` property of one object.
///
/// A channel is shared state: its object's storage reaches it through the
/// ``_Sentinel``, and every ``_Relation`` on it holds it strongly so it can
/// detach itself whatever the order of deaths. All mutable state is inside one
/// `_Mutex`; no user code runs while it is held (handlers run on a snapshot,
/// after unlocking, and relations — whose release may release a handler and
/// its captures — are dropped after unlocking too).
@usableFromInline
final class _Channel: Sendable {
    struct State {
        /// Registration order; ended relations leave `nil` until compaction.
        var relations: ContiguousArray<_Relation?> = []
        var liveCount = 0
        /// Live relations asking for `.old` (the setter copies the old value only then).
        var oldCount = 0
        /// Live relations asking for `.prior`.
        var priorCount = 0
        /// Round-robin position of the sweep for relations whose listener died.
        var sweepCursor = 0
        var isTornDown = false
        /// `.old` when `oldCount > 0`, `.prior` when `priorCount > 0`: one
        /// load for a change (``beginEmission(on:)``). Beside `isTornDown`,
        /// in what would be padding (before `sweepCursor` it took a word).
        var needs: Needs = []
    }

    /// What the relations of a property ask a change for beyond its new value.
    @usableFromInline
    struct Needs: OptionSet, Sendable {
        @usableFromInline let rawValue: UInt8

        @inlinable
        init(rawValue: UInt8) { self.rawValue = rawValue }

        /// Some relation asks for `.old`: the setter copies the old value.
        @inlinable static var old: Needs { Needs(rawValue: 1) }
        /// Some relation asks for `.prior`.
        @inlinable static var prior: Needs { Needs(rawValue: 2) }
    }

    /// What one change delivers to: a snapshot of the relation list taken
    /// under the lock (the observed object is the caller's to hold).
    @usableFromInline
    struct Emission {
        let relations: ContiguousArray<_Relation?>
        @usableFromInline let needs: Needs
        let probe: _Probe

        @inlinable
        var needsOld: Bool { needs.contains(.old) }
        @inlinable
        var hasPrior: Bool { needs.contains(.prior) }

        /// Delivers one phase of a change to the snapshot, unlocked.
        ///
        /// A relation ended meanwhile (even by an earlier handler of this very
        /// loop) is skipped; a relation whose listener died is ended on the
        /// spot (the snapshot still owns it, so no handler is released, and no
        /// user code runs, inside the loop). Nothing is retained per relation
        /// but the listener, for the duration of its call: the snapshot owns
        /// the relations, and each relation its handler.
        ///
        /// Changes of one property reach each relation in the order they were
        /// stored: when a handler changes the property it observes, the
        /// nested change is delivered at once, so a relation later in the
        /// list is told the newer change first; the older change's phase is
        /// then skipped for it (its handler would otherwise see values go
        /// back, and end on a stale one). That is this loop, for relations
        /// that receive new values only; when some ask for `.old` or
        /// `.prior`, ``deliverInOrder(root:change:phase:sequence:channel:enclosing:renewing:)``
        /// tells such a relation the older change first. Dependencies of derived key paths
        /// that re-evaluate the key path always deliver its current value and
        /// are never skipped; the last link of a chain forwards the change
        /// itself, so it is ordered like any relation.
        ///
        /// - Complexity: O(*n*) in the relations of this property only.
        ///
        /// A relation's ``_Relation/lastChange`` is checked and set with a
        /// plain load and store: changes of an `@Observed` property are
        /// made (and so delivered) one at a time by the caller's
        /// synchronization, and an `.initial` that raises it meanwhile also
        /// marks its hop's queue (see ``_Hop/Queue``). A registrar's
        /// changes, which may be delivered from several threads at once,
        /// use ``deliverConcurrently(root:change:sequence:)``.
        @usableFromInline
        func deliver(root: AnyObject, change: UnsafeRawPointer, phase: _Phase, sequence: UInt64) {
            forEachLiveRelation(phase: phase) { relation, listener in
                if phase == .change, relation.ordersChanges {
                    // Told about a newer change already: skip this one.
                    guard relation.lastChange.load(ordering: .relaxed) < sequence else { return }
                    relation.lastChange.store(sequence, ordering: .relaxed)
                    return relation.deliver(listener, root, change, .change, sequence)
                }
                relation.deliver(listener, root, change, phase, 0)
            }
        }

        /// ``deliver(root:change:phase:sequence:)`` for a change phase that
        /// may be delivered while another thread delivers another change of
        /// the property: each relation's `lastChange` only grows (a
        /// compare-exchange), so no older change is told after a newer one.
        @usableFromInline
        func deliverConcurrently(root: AnyObject, change: UnsafeRawPointer, sequence: UInt64) {
            forEachLiveRelation(phase: .change) { relation, listener in
                if relation.ordersChanges {
                    guard relation.advanceLastChange(to: sequence) else { return }
                    return relation.deliver(listener, root, change, .change, sequence)
                }
                relation.deliver(listener, root, change, .change, 0)
            }
        }

        /// Delivers an event (a notification) to the snapshot: like a change,
        /// except that every one is delivered — an event posted from inside a
        /// handler does not make the outer one stale, as a newer value does.
        @usableFromInline
        func deliverEvent(root: AnyObject, change: UnsafeRawPointer) {
            forEachLiveRelation(phase: .change) { relation, listener in
                relation.deliver(listener, root, change, .change, 0)
            }
        }

        /// Calls `body` with each relation of the snapshot that `phase`
        /// concerns, still active, and whose listener is alive (held for the
        /// call); see ``deliver(root:change:phase:sequence:)``.
        @inline(__always)
        private func forEachLiveRelation(phase: _Phase, _ body: (_Relation, AnyObject) -> Void) {
            relations.withUnsafeBufferPointer { buffer in
                for index in buffer.indices {
                    // A bitwise copy of the snapshot's strong reference, which
                    // the snapshot keeps for the whole loop (so no retain);
                    // nil for an ended relation's slot.
                    let slot = UnsafeRawPointer(buffer.baseAddress! + index)
                    // Unmanaged: owned by the snapshot for the loop (see above).
                    guard let entry = slot.load(as: Unmanaged<_Relation>?.self) else { continue }
                    entry._withUnsafeGuaranteedRef { relation in
                        if phase == .prior, !relation.options.contains(.prior) { return }
                        guard relation.isActive else { return }
                        guard let listener = probe.load(relation.listener) else {
                            relation.endForDeadListener()
                            return
                        }
                        body(relation, listener)
                    }
                }
            }
        }

        /// Delivers the prior phase (before the store) to the relations that
        /// asked for `.prior`, if any.
        @inlinable @inline(__always)
        func deliverPrior<Value>(root: AnyObject, old: Value?, channel: _Channel) {
            guard hasPrior else { return }
            withUnsafePointer(to: ObservedChange(newValue: nil, oldValue: old)) {
                deliverPriorInOrder(root: root, change: $0, channel: channel)
            }
        }

        /// Delivers the change (after the store) of `channel`'s property,
        /// numbered in the order of stores (see ``_Channel/changeCount``).
        @inlinable @inline(__always)
        func deliverChange<Value>(root: AnyObject, new: Value, old: Value?, channel: _Channel) {
            withUnsafePointer(to: ObservedChange(newValue: new, oldValue: old)) {
                deliverChange(root: root, change: $0, channel: channel)
            }
        }

        /// Numbers the change in the order of stores, then delivers it (out
        /// of line, so that the setter stays small).
        @usableFromInline
        func deliverChange(root: AnyObject, change: UnsafeRawPointer, channel: _Channel) {
            // The same arguments: a jump, with nothing to move.
            if _slowPath(!needs.isEmpty) {
                return deliverChangeInOrder(root: root, change: change, channel: channel, sequence: nil)
            }
            let sequence = channel.changeCount.wrappingAdd(1, ordering: .relaxed).newValue
            deliver(root: root, change: change, phase: .change, sequence: sequence)
        }

        /// Delivers the change numbered `sequence` (see
        /// ``_Channel/readAndNumber(_:)``); then, if relations were added
        /// since the count `additions` was taken, to them (see
        /// ``deliverToRelationsAdded(root:change:sequence:channel:)``).
        @inlinable @inline(__always)
        func deliverChange<Value>(
            root: AnyObject, new: Value, old: Value?, channel: _Channel, sequence: UInt64, additions: UInt64
        ) {
            withUnsafePointer(to: ObservedChange(newValue: new, oldValue: old)) {
                deliverNumberedChange(
                    root: root, change: $0, channel: channel, sequence: sequence, additions: additions)
            }
        }

        /// ``deliverChange(root:change:channel:)`` for a change numbered
        /// already, and told to the relations added since `additions`.
        @usableFromInline
        func deliverNumberedChange(
            root: AnyObject, change: UnsafeRawPointer, channel: _Channel, sequence: UInt64, additions: UInt64
        ) {
            if _slowPath(!needs.isEmpty) {
                deliverChangeInOrder(root: root, change: change, channel: channel, sequence: sequence)
            } else {
                deliverConcurrently(root: root, change: change, sequence: sequence)
            }
            if channel.additions.load(ordering: .acquiring) != additions {
                deliverToRelationsAdded(root: root, change: change, sequence: sequence, channel: channel)
            }
        }

        /// After the change numbered `sequence` was delivered: the relations
        /// added to the channel since the snapshot was taken (or its prior
        /// phase ended: relations added during a delivery see only later
        /// changes) are told it too, unless told a newer change. Such a
        /// relation was added on another thread while the change was on its
        /// way: before its store, it may have read the value before the
        /// store (then it needs the change, which the snapshot did not hold);
        /// after its numbering, it was created with this number or a later
        /// one as told, and is skipped. So a registration that races with a
        /// registrar's change never misses it. A relation asking for
        /// `.prior` is told the change's prior first, as a hop's late one.
        /// (An `@Observed` property's
        /// writers and registrations are synchronized by the caller: its
        /// changes skip this.)
        ///
        /// - Complexity: O(*n*) in the relations of the property; only when
        ///   a relation was added during the change.
        @inline(never)
        func deliverToRelationsAdded(root: AnyObject, change: UnsafeRawPointer, sequence: UInt64, channel: _Channel) {
            guard let current = channel.beginEmission(on: root) else { return }
            current.forEachLiveRelation(phase: .change) { relation, listener in
                // After its prior, if it asks for one (it was not in the
                // snapshot of the prior phase).
                guard relation.ordersChanges else { return }
                current.tellChange(relation, listener, root: root, change: change, sequence: sequence)
            }
        }

        // MARK: Nested changes

        /// The prior phase of a change of a property some of whose relations
        /// ask for `.old` or `.prior` (see ``deliverInOrder(root:change:phase:sequence:channel:enclosing:renewing:)``).
        ///
        /// Filed as in flight on this thread while it is delivered, so that a
        /// change a prior handler nests in it announces this change again
        /// when it ends (see ``renewPrior(_:root:old:)``).
        @usableFromInline @inline(never)
        func deliverPriorInOrder(root: AnyObject, change: UnsafeRawPointer, channel: _Channel) {
            let sequence = channel.changeCount.load(ordering: .relaxed)
            let enclosing = _InFlightChange.innermost
            withUnsafePointer(to: self) { emission in
                var record = _InFlightChange(
                    channel: ObjectIdentifier(channel), sequence: sequence, change: UnsafeRawPointer(emission),
                    enclosing: enclosing, isPrior: true)
                withUnsafePointer(to: &record) { record in
                    _InFlightChange.innermost = record
                    defer { _InFlightChange.innermost = enclosing }
                    deliverInOrder(
                        root: root, change: change, phase: .prior, sequence: sequence, channel: channel,
                        enclosing: enclosing)
                }
            }
        }

        /// After a change of `channel`'s property ends: the prior phase of
        /// the change it is nested in, if that is the innermost change of the
        /// property in flight on this thread (a prior handler made this
        /// one). The caller then announces that change again with
        /// ``renewPrior(_:root:old:)``, from the value stored now.
        ///
        /// - Complexity: O(*d*), *d* changes in flight on this thread.
        @usableFromInline
        static func enclosingPriorPhase(channel: _Channel) -> UnsafePointer<_InFlightChange>? {
            var record = _InFlightChange.innermost
            while let current = record {
                if current.pointee.channel == ObjectIdentifier(channel) {
                    return current.pointee.isPrior ? current : nil
                }
                record = current.pointee.enclosing
            }
            return nil
        }

        /// Announces again the change whose prior phase `record` is, to the
        /// relations of its snapshot that consumed the prior they were told
        /// on a change nested in it since (a prior handler changed the
        /// property): each gets a prior with the value stored now as its old
        /// value, before the enclosing change stores its own. Runs inside the
        /// nested change, so a handler that changes the property again nests
        /// one level deeper, as it would in a change handler.
        @inlinable
        static func renewPrior<Value>(
            _ record: UnsafePointer<_InFlightChange>, root: AnyObject, old: Value?, channel: _Channel
        ) {
            withUnsafePointer(to: ObservedChange(newValue: nil, oldValue: old)) {
                renewPrior(record, root: root, change: $0, channel: channel)
            }
        }

        @usableFromInline
        static func renewPrior(
            _ record: UnsafePointer<_InFlightChange>, root: AnyObject, change: UnsafeRawPointer, channel: _Channel
        ) {
            // The enclosing change's emission, on its frame for its prior phase.
            let enclosing = record.pointee.change.assumingMemoryBound(to: Emission.self)
            enclosing.pointee.deliverInOrder(
                root: root, change: change, phase: .prior, sequence: record.pointee.sequence, channel: channel,
                enclosing: record.pointee.enclosing, renewing: true)
        }

        /// The change phase of a change of a property some of whose relations
        /// ask for `.old` or `.prior`: filed as in flight on this thread while
        /// it is delivered, so that a change a handler nests in it tells the
        /// relations this one has not reached yet about it first.
        @inline(never)
        func deliverChangeInOrder(root: AnyObject, change: UnsafeRawPointer, channel: _Channel, sequence: UInt64?) {
            let sequence = sequence ?? channel.changeCount.wrappingAdd(1, ordering: .relaxed).newValue
            let enclosing = _InFlightChange.innermost
            var record = _InFlightChange(
                channel: ObjectIdentifier(channel), sequence: sequence, change: change, enclosing: enclosing,
                isPrior: false)
            withUnsafePointer(to: &record) { record in
                _InFlightChange.innermost = record
                defer { _InFlightChange.innermost = enclosing }
                deliverInOrder(
                    root: root, change: change, phase: .change, sequence: sequence, channel: channel,
                    enclosing: enclosing)
            }
        }

        /// Delivers one phase so that the deliveries of each relation asking
        /// for `.old` or `.prior` chain: its first old value is the value when
        /// it was added, each old value is the new value it was told last,
        /// each change comes after its prior (for relations asking for
        /// `.prior`), and a change nested in another (a handler changed the
        /// property) never reaches it before that other one. Other relations
        /// are delivered as by ``deliver(root:change:phase:sequence:)``.
        ///
        /// - A relation the changes this one is nested in (`enclosing`, in
        ///   flight on this thread) have not reached yet is told them first,
        ///   outermost first (they skip it later).
        /// - Prior phase (`sequence`: the number of the last change stored
        ///   before it): a relation still waiting for the change of a prior
        ///   it was told is skipped (that prior, a prior handler's change
        ///   nested in it, stands for it); so is one already told a change
        ///   stored after this phase began. `renewing` (a change nested in
        ///   this phase ended): for those alone, once they no longer wait.
        /// - Change phase: a relation asking for `.prior` that was not told
        ///   this change's prior (it was added meanwhile, or the prior it was
        ///   told went to a nested change) is told it first.
        ///
        /// - Complexity: O(*n* × *d*), *n* relations of this property and *d*
        ///   changes of it in flight on this thread (1 unless a handler
        ///   changes the property it is told about).
        func deliverInOrder(
            root: AnyObject, change: UnsafeRawPointer, phase: _Phase, sequence: UInt64, channel: _Channel,
            enclosing: UnsafePointer<_InFlightChange>?, renewing: Bool = false
        ) {
            forEachLiveRelation(phase: phase) { relation, listener in
                if phase == .change, relation.ordersChanges {
                    // Told about a newer change already: skip this one.
                    guard relation.lastChange.load(ordering: .relaxed) < sequence else { return }
                }
                // New values only (nothing to chain), or a dependency that
                // evaluates its key path anew: as ``deliver(root:change:phase:sequence:)``.
                guard relation.ordersChanges, !relation.options.isDisjoint(with: [.old, .prior]) else {
                    // (A dependency's prior phase is the first alone.)
                    if renewing { return }
                    if phase == .change, relation.ordersChanges {
                        guard relation.advanceLastChange(to: sequence) else { return }
                        return relation.deliver(listener, root, change, .change, sequence)
                    }
                    relation.deliver(listener, root, change, phase, 0)
                    return
                }
                if let enclosing { catchUp(relation, listener, root: root, from: enclosing, channel: channel) }
                if phase == .prior {
                    // The phase skips a relation told a change stored after
                    // it began (a prior handler made it); renewed, it is for
                    // those only.
                    guard !relation.awaitsChangeOfPrior.load(ordering: .relaxed),
                        (relation.lastChange.load(ordering: .relaxed) > sequence) == renewing
                    else { return }
                    relation.awaitsChangeOfPrior.store(true, ordering: .relaxed)
                    relation.deliver(listener, root, change, .prior, 0)
                } else {
                    tellChange(relation, listener, root: root, change: change, sequence: sequence)
                }
            }
        }

        /// Tells `relation` the changes of `channel`'s property in flight
        /// from `record` outwards that it was not told yet, outermost first.
        private func catchUp(
            _ relation: _Relation, _ listener: AnyObject, root: AnyObject,
            from record: UnsafePointer<_InFlightChange>, channel: _Channel
        ) {
            if let enclosing = record.pointee.enclosing {
                catchUp(relation, listener, root: root, from: enclosing, channel: channel)
            }
            guard record.pointee.channel == ObjectIdentifier(channel), !record.pointee.isPrior,
                relation.lastChange.load(ordering: .relaxed) < record.pointee.sequence,
                relation.isActive
            else { return }
            tellChange(relation, listener, root: root, change: record.pointee.change, sequence: record.pointee.sequence)
        }

        /// Tells `relation` the change numbered `sequence`, after its prior
        /// if it asks for one and was not told it.
        private func tellChange(
            _ relation: _Relation, _ listener: AnyObject, root: AnyObject, change: UnsafeRawPointer, sequence: UInt64
        ) {
            // Catching up ran handlers, which may have nested a change that
            // was told to this relation meanwhile (then this one is stale),
            // or ended it.
            guard relation.isActive, relation.lastChange.load(ordering: .relaxed) < sequence else { return }
            if relation.options.contains(.prior), !relation.awaitsChangeOfPrior.load(ordering: .relaxed) {
                // Told late (it was not in the snapshot of this change's
                // prior phase, or that prior went to a nested change): its
                // prior just before it, as a hop's. The change's own old
                // value is its prior's.
                relation.awaitsChangeOfPrior.store(true, ordering: .relaxed)
                relation.deliver(listener, root, change, .prior, 0)
                // The prior's handler may have ended the relation, or nested
                // a change that was told to it meanwhile (then this one is
                // stale).
                guard relation.isActive, relation.lastChange.load(ordering: .relaxed) < sequence else { return }
            }
            guard relation.advanceLastChange(to: sequence) else { return }
            relation.awaitsChangeOfPrior.store(false, ordering: .relaxed)
            relation.deliver(listener, root, change, .change, sequence)
        }

        /// The mutation threw after the prior phase: no change follows it.
        /// Derivations drop the old values they captured in that phase (so
        /// none outlives the change it was for), and relations await no
        /// change for the prior they were told; nothing is delivered.
        @inline(never)
        @usableFromInline
        func abandonPriorPhase(root: AnyObject) {
            for case let relation? in relations where relation.options.contains(.prior) && relation.isActive {
                // No change follows the prior it was told.
                relation.awaitsChangeOfPrior.store(false, ordering: .relaxed)
                guard relation.isDependency, let derivation = probe.load(relation.listener) else { continue }
                // No change: the phase says so, and `change` is never read.
                withUnsafePointer(to: ()) { relation.deliver(derivation, root, $0, .priorAbandoned, 0) }
            }
        }

    }

    let state = _Mutex(State())

    /// Counts the changes of the property as they are stored (each change
    /// phase takes the next number), so that a relation can tell an older
    /// change from a newer one it was already told about.
    @usableFromInline let changeCount = Atomic<UInt64>(0)

    /// How many relations were added, counted under the lock: a change
    /// compares it with its snapshot's after its delivery (see
    /// ``Emission/deliverToRelationsAdded(root:change:sequence:channel:)``).
    @usableFromInline let additions = Atomic<UInt64>(0)

    /// The observed object, never kept alive: identity, and whether it died
    /// (its sentinel may outlive it in a copy of the storage).
    @usableFromInline let object: _UnretainedReference

    /// The observed object's identity: its address, taken while it was
    /// alive (so that the sentinel's `deinit` never forms a reference to a
    /// dying object), which ``object`` keeps.
    var objectID: ObjectIdentifier {
        // unsafeBitCast: an object's identity is its address; used as an
        // identity only, never as a reference.
        unsafeBitCast(object.address, to: ObjectIdentifier.self)
    }

    /// The observed property's key path as declared (`\Counter.count`, the
    /// `@Observed` getter's own), kept here once so that a tracked read
    /// records the channel alone, and so that a property reporting to
    /// Observation names itself with it rather than forming its key path
    /// on every access; `nil` for a notification hub's channels, which
    /// observe no property.
    // nonisolated(unsafe): immutable, and a key path object is never mutated
    // after it is formed (a property's captures nothing), so sharing it is safe.
    @usableFromInline nonisolated(unsafe) let keyPath: AnyKeyPath?

    init(object: AnyObject, keyPath: AnyKeyPath?) {
        self.object = _UnretainedReference(object)
        self.keyPath = keyPath
    }

    // MARK: Emission

    /// Delivers one change of `root`'s property: `.prior` relations before
    /// `mutate`, the others after it. Without relations (or inside `root`'s
    /// own `deinit`) it only runs `mutate`.
    ///
    /// `root` is kept alive throughout (a handler may drop the last other
    /// reference to it while the caller only borrows it). `readOld` runs only
    /// when some relation asks for `.old`. If `mutate` throws, no change is
    /// delivered. Inlined into the property's setter, so the closures' storage
    /// accesses fold to direct field accesses.
    ///
    /// `readsNewInOrder`: `readNew` reads the property (a registrar's, whose
    /// storage the caller synchronizes), so that a change made on another
    /// thread meanwhile may be read here; the read and the change's number
    /// are then taken as one step (``readAndNumber(_:)``).
    @inlinable
    func emitChange<Value, Result>(
        of root: AnyObject,
        readOld: () -> Value,
        mutate: () throws -> Result,
        readNew: () -> Value,
        readsNewInOrder: Bool = false
    ) rethrows -> Result {
        // The relations added since (see `Emission.deliverToRelationsAdded`).
        var additionsSeen: UInt64 = 0
        let emission = readsNewInOrder ? beginEmission(on: root, additions: &additionsSeen) : beginEmission(on: root)
        guard let emission else {
            let result = try mutate()
            // No relation when the change began: one added meanwhile (on
            // another thread) may have read the value before the store.
            if readsNewInOrder, additions.load(ordering: .acquiring) != additionsSeen {
                emitStoredChange(of: root, readNew: readNew)
            }
            return result
        }
        var old: Value? = emission.needsOld ? readOld() : nil
        if _slowPath(emission.hasPrior) {
            emission.deliverPrior(root: root, old: old, channel: self)
            // A prior handler may have changed the property: the change
            // starts from the value stored now.
            if emission.needsOld { old = readOld() }
            if readsNewInOrder { additionsSeen = additionsSoFar() }
        }
        // Folds away when `mutate` cannot throw (an `@Observed` setter).
        var didMutate = false
        defer { if !didMutate, emission.hasPrior { emission.abandonPriorPhase(root: root) } }
        let result = try mutate()
        didMutate = true
        if readsNewInOrder {
            let (new, sequence) = readAndNumber(readNew)
            emission.deliverChange(
                root: root, new: new, old: old, channel: self, sequence: sequence, additions: additionsSeen)
        } else {
            emission.deliverChange(root: root, new: readNew(), old: old, channel: self)
        }
        if _slowPath(emission.hasPrior), let record = Emission.enclosingPriorPhase(channel: self) {
            Emission.renewPrior(record, root: root, old: emission.needsOld ? readOld() : nil, channel: self)
        }
        return result
    }

    /// Delivers a change already stored (a registrar's property, changed
    /// while unobserved as a registration made its sentinel): its new value
    /// read and numbered as one step, no old value. Nothing without
    /// relations, or inside `root`'s own `deinit`.
    @inlinable
    func emitStoredChange<Value>(of root: AnyObject, readNew: () -> Value) {
        var additionsSeen: UInt64 = 0
        guard let emission = beginEmission(on: root, additions: &additionsSeen) else { return }
        let (new, sequence) = readAndNumber(readNew)
        emission.deliverChange(
            root: root, new: new, old: nil, channel: self, sequence: sequence, additions: additionsSeen)
    }

    /// Reads the property's new value with `readNew` and numbers the change
    /// (``changeCount``) as one step: if another change took a number
    /// between the read and the numbering, the value is read again. So the
    /// values changes deliver follow their numbers: each read happens after
    /// the previous number was taken, and the caller's synchronization makes
    /// it see that change's store or a later one. (Numbering after a plain
    /// read let a thread that stored, then waited, deliver its older value
    /// as the newest change: 4,785, 4,786, 4,787, then 4,009.) An
    /// `.initial` told on a hop reads its value this way too, taking a
    /// number no change has: the changes numbered before it are the ones
    /// its value includes.
    ///
    /// - Complexity: O(1) when no other thread changes the property at the
    ///   same time; otherwise one more read per change that took a number
    ///   meanwhile.
    @inlinable
    func readAndNumber<Value>(_ readNew: () -> Value) -> (Value, UInt64) {
        let (new, number, _) = readAndNumber(readNew, afterEachRead: {})
        return (new, number)
    }

    /// The loop of ``readAndNumber(_:)``, calling `afterEachRead` between
    /// each read and its numbering (and returning what the last call
    /// returned).
    @inlinable
    func readAndNumber<Value, Noted>(_ readNew: () -> Value, afterEachRead: () -> Noted) -> (Value, UInt64, Noted) {
        var count = changeCount.load(ordering: .acquiring)
        while true {
            let new = readNew()
            let noted = afterEachRead()
            let (exchanged, original) = changeCount.compareExchange(
                expected: count, desired: count &+ 1, ordering: .acquiringAndReleasing)
            if exchanged { return (new, count &+ 1, noted) }
            count = original
        }
    }

    /// ``readAndNumber(_:)`` for an `.initial`, also telling whether the
    /// value may include a store whose change is numbered after it: a
    /// registrar's mutation of an object of the same stripe was under way
    /// (``_MutationGauge``). Otherwise every store it saw was numbered
    /// before it.
    @inlinable
    func readAndNumberForInitial<Value>(_ readNew: () -> Value) -> (Value, UInt64, mayPrecedeItsChange: Bool) {
        let gauge = _MutationGauge.stripe(for: object.address)
        // After the read, before the numbering: zero means that every
        // mutation whose store the read saw has taken its number.
        return readAndNumber(readNew, afterEachRead: { gauge.isBusy })
    }

    /// Takes the snapshot a change is delivered to, or returns `nil` when
    /// nobody listens or `root` is inside its own `deinit`.
    ///
    /// `root` is not retained: it is the object whose property changes, and
    /// the caller holds it for the whole emission (Swift keeps a setter's or
    /// a `_modify`'s object alive for the call, even if a handler releases
    /// every other reference to it).
    ///
    /// - Complexity: O(1): one lock, one retain of the relation list and one
    ///   `swift_isDeallocating` of `root`.
    @usableFromInline
    func beginEmission(on root: AnyObject) -> Emission? {
        let probe = _Probe.current
        let emission = state.withLock { state -> Emission? in
            guard state.liveCount > 0 else { return nil }
            return Emission(relations: state.relations, needs: state.needs, probe: probe)
        }
        guard let emission, !_swift_isDeallocating(root) else { return nil }
        return emission
    }

    /// How many relations were added so far, read under the lock (so that
    /// no relation added before is left out of the count).
    @usableFromInline
    func additionsSoFar() -> UInt64 {
        state.withLock { _ in additions.load(ordering: .relaxed) }
    }

    /// ``beginEmission(on:)``, also setting `additions` to the count of
    /// relations added so far, taken with the snapshot (or its absence).
    @usableFromInline
    func beginEmission(on root: AnyObject, additions count: inout UInt64) -> Emission? {
        let probe = _Probe.current
        let emission = state.withLock { state -> Emission? in
            count = additions.load(ordering: .relaxed)
            guard state.liveCount > 0 else { return nil }
            return Emission(relations: state.relations, needs: state.needs, probe: probe)
        }
        guard let emission, !_swift_isDeallocating(root) else { return nil }
        return emission
    }

    /// Starts delivering an event (a notification) whose root the caller
    /// holds for the whole delivery: a snapshot of the relations, as for a
    /// change, without the root's liveness probe; `nil` when nobody listens.
    @usableFromInline
    func beginEvent() -> Emission? {
        let probe = _Probe.current
        return state.withLock { state -> Emission? in
            guard state.liveCount > 0 else { return nil }
            return Emission(relations: state.relations, needs: [], probe: probe)
        }
    }

    // MARK: Registration

    /// Appends a relation; `false` if the property's object died meanwhile or
    /// the relation already ended (a concurrent unobserve).
    ///
    /// Also inspects two older relations (round-robin) and ends those whose
    /// listener died, so that relations of dead listeners on an object that
    /// never changes stay bounded.
    ///
    /// - Complexity: Amortized O(1).
    func add(_ relation: _Relation) -> Bool {
        let (added, first, second) = state.withLock { state -> (Bool, _Relation?, _Relation?) in
            guard !state.isTornDown, relation.isActive else { return (false, nil, nil) }
            // Amortized sweep: two older relations per new one, probed after
            // unlocking (a liveness check must not run under the lock).
            var candidates: (_Relation?, _Relation?) = (nil, nil)
            let count = state.relations.count
            if count > 0 {
                if state.sweepCursor >= count { state.sweepCursor = 0 }
                candidates.0 = state.relations[state.sweepCursor]
                state.sweepCursor = state.sweepCursor + 1 < count ? state.sweepCursor + 1 : 0
                candidates.1 = state.relations[state.sweepCursor]
                state.sweepCursor += 1
            }
            relation.slot = count
            state.relations.append(relation)
            additions.wrappingAdd(1, ordering: .releasing)
            state.liveCount += 1
            if relation.options.contains(.old) {
                state.oldCount += 1
                state.needs.insert(.old)
            }
            if relation.options.contains(.prior) {
                state.priorCount += 1
                state.needs.insert(.prior)
            }
            return (true, candidates.0, candidates.1)
        }
        if let first, first.listener.isGone { first.end() }
        if let second, second !== first, second.listener.isGone { second.end() }
        return added
    }

    /// - Complexity: Amortized O(1): an ended relation leaves a `nil` slot
    ///   (trailing ones are dropped at once), and the list is compacted in
    ///   place, in one pass, once those outnumber live relations.
    func remove(_ relation: _Relation) {
        let removed = state.withLock { state -> _Relation? in
            let slot = relation.slot
            guard !state.isTornDown, slot >= 0, slot < state.relations.count,
                state.relations[slot] === relation
            else { return nil }
            relation.slot = -1
            let removed: _Relation?
            if slot == state.relations.count - 1 {
                removed = state.relations.removeLast()
            } else {
                removed = state.relations[slot]
                state.relations[slot] = nil
            }
            state.liveCount -= 1
            if relation.options.contains(.old) {
                state.oldCount -= 1
                if state.oldCount == 0 { state.needs.remove(.old) }
            }
            if relation.options.contains(.prior) {
                state.priorCount -= 1
                if state.priorCount == 0 { state.needs.remove(.prior) }
            }
            while let last = state.relations.last, last == nil {
                state.relations.removeLast()
            }
            // After a peak, give the storage back (nothing is released with
            // it but memory: the list is empty).
            if state.relations.isEmpty, state.relations.capacity > 64 { state.relations = [] }
            let ended = state.relations.count - state.liveCount
            if ended >= 16, ended > state.liveCount {
                Self.compact(&state)
            }
            return removed
        }
        // The list's reference (and with the last one, the handler and its
        // captures) is released here, unlocked.
        _ = removed
    }

    /// Drops the ended slots, keeping order; gives storage back when the
    /// list uses under a quarter of it (the relations it holds are kept by
    /// the new list, so releasing the old one frees only memory).
    private static func compact(_ state: inout State) {
        var kept = 0
        for index in state.relations.indices {
            guard let relation = state.relations[index] else { continue }
            relation.slot = kept
            state.relations[kept] = relation
            kept += 1
        }
        state.relations.removeLast(state.relations.count - kept)
        if state.relations.capacity > 64, state.relations.capacity > 4 * kept {
            var smaller = ContiguousArray<_Relation?>()
            smaller.reserveCapacity(kept)
            smaller.append(contentsOf: state.relations)
            state.relations = smaller
        }
        state.sweepCursor = 0
    }

    // MARK: Teardown

    /// Called once, from the sentinel's `deinit`: the object died.
    ///
    /// Every relation is ended, every listener proxy forgets it, and every
    /// handler is released — after the lock is dropped.
    ///
    /// - Complexity: O(*n*) in the relations of this property.
    func tearDown() {
        let relations = state.withLock { state -> ContiguousArray<_Relation?> in
            state.isTornDown = true
            state.liveCount = 0
            state.oldCount = 0
            state.priorCount = 0
            state.needs = []
            defer { state.relations = [] }
            return state.relations
        }
        var derivations: [(derivation: _Derivation, dependency: _Relation)] = []
        // Proxies left with no relation, taken out of the proxy table
        // together at the end (most objects retire none or one).
        var firstRetired: _ListenerProxy?
        var moreRetired: [_ListenerProxy] = []
        relations.withUnsafeBufferPointer { buffer in
            for index in buffer.indices {
                // Unmanaged: `relations` owns each relation for the loop (as
                // in an emission's snapshot), so none is retained here.
                let slot = UnsafeRawPointer(buffer.baseAddress! + index)
                guard let entry = slot.load(as: Unmanaged<_Relation>?.self) else { continue }
                entry._withUnsafeGuaranteedRef { relation in
                    guard relation.markEnded() else { return }
                    // One short critical section of the proxy per relation
                    // (most relations of an object have distinct listeners);
                    // the proxies it retires leave the proxy table together.
                    let proxy = relation.proxy
                    if proxy.forgetRetiringIfEmpty(relation) {
                        if firstRetired == nil {
                            firstRetired = proxy
                        } else {
                            if moreRetired.isEmpty { moreRetired.reserveCapacity(buffer.count - index) }
                            moreRetired.append(proxy)
                        }
                    }
                    if relation.isDependency, let derivation = relation.listener.load() as? _Derivation {
                        derivations.append((derivation, relation))
                    }
                }
            }
        }
        if let firstRetired { _ProxyTable.removeRetired(firstRetired, moreRetired) }
        // Derived key paths that read this property learn that its object
        // died: they end if it was their root, or forget the dependency.
        for (derivation, dependency) in derivations {
            derivation.dependencyTornDown(dependency)
        }
        // `relations` (and so every handler) is released here, unlocked.
    }

    // MARK: Introspection

    /// Whether the channel was torn down (its object died).
    var isTornDown: Bool { state.withLock { $0.isTornDown } }

    /// The active relations on this property, dependencies of derived key
    /// paths included.
    func liveRelations() -> [_Relation] {
        state.withLock { state in
            state.relations.compactMap { relation in relation.flatMap { $0.isActive ? $0 : nil } }
        }
    }
}

/// A change of one property one of whose phases is being delivered on this
/// thread, for a property some of whose relations ask for `.old` or `.prior`:
/// the innermost is ``innermost``, and each links to the one it is nested in
/// (see ``_Channel/Emission/deliverInOrder(root:change:phase:sequence:channel:enclosing:renewing:)``).
@usableFromInline
struct _InFlightChange {
    let channel: ObjectIdentifier
    /// The change's number; for a prior phase, the number of the last
    /// change stored before it began.
    let sequence: UInt64
    /// The change phase: the change (an `ObservedChange<Value>` of the
    /// property); the prior phase: its ``_Channel/Emission``. Either on the
    /// stack of the frame delivering it.
    let change: UnsafeRawPointer
    let enclosing: UnsafePointer<_InFlightChange>?
    let isPrior: Bool

    /// The innermost change in flight on this thread. The slot points into
    /// the frame delivering that change, which restores it before returning.
    static var innermost: UnsafePointer<_InFlightChange>? {
        get { _innermostChange.value.map { UnsafePointer($0.assumingMemoryBound(to: _InFlightChange.self)) } }
        set { _innermostChange.value = newValue.map { UnsafeMutableRawPointer(mutating: $0) } }
    }
}

private let _innermostChange = _ThreadLocalPointer()
