import Synchronization

extension _Hop {
    /// One queued change, its mailbox ticket (0 until filed: changes
    /// queued before the relation is attached are filed when it is) and its
    /// number (0 when it has none, see ``_Deliver``).
    @usableFromInline
    struct Item {
        @usableFromInline var ticket: UInt64
        @usableFromInline var change: ObservedChange<Value>
        @usableFromInline var sequence: UInt64

        @usableFromInline
        init(ticket: UInt64, change: ObservedChange<Value>, sequence: UInt64 = 0) {
            self.ticket = ticket
            self.change = change
            self.sequence = sequence
        }
    }

    /// The relation's queued changes. Guarded by the mailbox's lock (every
    /// transition runs inside it, with the mailbox's state at hand);
    /// transitions never release a value there: what they replace or drop
    /// is returned.
    @usableFromInline
    struct Queue {
        /// Queued changes from `head` on; delivered slots are `nil`.
        @usableFromInline var items: ContiguousArray<Item?> = []
        /// ``head``, in 32 bits, so that it shares a word with the two
        /// flags below: the queue (and so every hop) stays 48 bytes with
        /// ``baseline``. More than 2³² queued changes would take hundreds
        /// of gigabytes first.
        @usableFromInline var headIndex: UInt32 = 0
        /// A prior notification was dropped, with `coalescing`, because a
        /// change was waiting that its change would merge into: if that
        /// change is delivered before this one arrives, the prior is queued
        /// again in front of it (each delivered change keeps its prior).
        @usableFromInline var priorAwaitsItsChange = false
        /// A prior notification came while ``baseline`` was kept: told
        /// just before its change, or dropped with it.
        @usableFromInline var baselineHoldsPrior = false
        /// The relation, once registered (see ``_Hop/attach(_:)``).
        @usableFromInline var relation: _RelationReference?
        /// The changes numbered up to this one (``_Channel/changeCount``)
        /// are superseded by an `.initial` told on the actor: one of them
        /// still on its way here is dropped when it comes.
        @usableFromInline var supersededThrough: UInt64 = 0
        /// The value an `.initial` told while a registrar's mutation was
        /// under way (``_Channel/readAndNumberForInitial(_:)``), so that
        /// its read may have seen a store whose change is numbered after
        /// it: the next change is dropped if it brings that value (the
        /// relation was told it), and otherwise told with it as its old
        /// value, so that the relation's values chain from its `.initial`.
        /// A prior notification that comes meanwhile is held until its
        /// change, and goes with it. While it is kept, `hasPending` stays
        /// set, so that a change made on the actor comes through
        /// ``enqueue(_:sequence:coalescing:tellsOld:object:hop:mailbox:hasPending:)`` too.
        @usableFromInline var baseline: _Baseline<Value>?

        @usableFromInline
        init() {}

        /// Nothing is queued any more: `hasPending` is cleared, unless a
        /// ``baseline`` is kept (the changes it checks must come through
        /// the queue).
        @inlinable
        func clearPending(_ hasPending: borrowing Atomic<Bool>) {
            if baseline == nil { hasPending.store(false, ordering: .releasing) }
        }

        /// The index of the oldest queued change in `items`.
        @inlinable
        var head: Int {
            get { Int(headIndex) }
            set { headIndex = UInt32(truncatingIfNeeded: newValue) }
        }

        @inlinable
        var isEmpty: Bool { head == items.count }

        /// The relation, unless it ended and was released. Mutating only so
        /// that the reference is borrowed where it is stored, not copied
        /// (a copy of an unowned reference counts its allocation twice).
        @inlinable
        mutating func loadRelation() -> _Relation? {
            _load(relation)
        }

        /// Filed changes have a job coming (the mailbox's), and changes are
        /// filed once the relation is attached; checked after each
        /// transition under `SAFEOBSERVE_INTERNAL_CHECKS`.
        @inlinable
        func _checkInvariants(_ mailbox: _Mailbox.State) {
            #if SAFEOBSERVE_INTERNAL_CHECKS
                precondition(head <= items.count, "_Hop: head past the queue")
                precondition(isEmpty || relation == nil || mailbox.isScheduled, "_Hop: queued changes and no job")
            #endif
        }

        /// Queues `change`, filing it in `mailbox` as `hop`'s if the
        /// relation is attached; with `coalescing`, merges it into a waiting
        /// change instead (the first old value and the latest new value), and
        /// drops a prior notification while a change is waiting (its prior
        /// stands for the merged change). Returns what the merge replaced
        /// (or `change`, dropped), and whether the mailbox's job must be
        /// scheduled.
        ///
        /// A change numbered `sequence` (not 0: see ``_Deliver``) is
        /// dropped if a newer one reached the relation after it was
        /// numbered (its delivery runs on another thread, or on the actor),
        /// or an `.initial` superseded it: the check and the queueing are
        /// one step under the lock, so no older change is queued behind a
        /// newer one. With a ``baseline``, a change is checked against it
        /// first (`tellsOld`: the relation asks for `.old`); the baseline it
        /// consumes is returned as `spent`, to release unlocked.
        @inlinable
        mutating func enqueue(
            _ change: ObservedChange<Value>, sequence: UInt64, coalescing: Bool, tellsOld: Bool,
            object: UnsafeMutableRawPointer, hop: _AnyHop, mailbox: inout _Mailbox.State,
            hasPending: borrowing Atomic<Bool>
        ) -> (replaced: ObservedChange<Value>?, schedule: Bool, spent: _Baseline<Value>?) {
            defer { _checkInvariants(mailbox) }
            if sequence != 0, sequence <= supersededThrough || relationWasToldAfter(sequence) {
                return (change, false, nil)
            }
            // A baseline is rare: its check is out of line, so that this
            // stays small enough for the caller's critical section to
            // inline it (the coalesced burst row: see Benchmarks/README).
            if _slowPath(baseline != nil) {
                return enqueueAfterBaseline(
                    change, sequence: sequence, coalescing: coalescing, tellsOld: tellsOld, object: object, hop: hop,
                    mailbox: &mailbox, hasPending: hasPending)
            }
            let (replaced, schedule) = coalesceOrAppend(
                change, sequence: sequence, coalescing: coalescing, hop: hop, mailbox: &mailbox, hasPending: hasPending)
            return (replaced, schedule, nil)
        }

        /// ``enqueue(_:sequence:coalescing:tellsOld:object:hop:mailbox:hasPending:)``
        /// while a ``baseline`` is kept: the change is checked against it,
        /// then queued.
        @inlinable @inline(never)
        mutating func enqueueAfterBaseline(
            _ change: ObservedChange<Value>, sequence: UInt64, coalescing: Bool, tellsOld: Bool,
            object: UnsafeMutableRawPointer, hop: _AnyHop, mailbox: inout _Mailbox.State,
            hasPending: borrowing Atomic<Bool>
        ) -> (replaced: ObservedChange<Value>?, schedule: Bool, spent: _Baseline<Value>?) {
            var spent: _Baseline<Value>?
            guard let chained = chainFromBaseline(change, tellsOld: tellsOld, object: object, spent: &spent) else {
                return (change, false, nil)
            }
            let schedule = chained.prior.map { append($0, hop: hop, mailbox: &mailbox) } ?? false
            let (replaced, scheduled) = coalesceOrAppend(
                chained.change, sequence: sequence, coalescing: coalescing, hop: hop, mailbox: &mailbox,
                hasPending: hasPending)
            return (replaced, schedule || scheduled, spent)
        }

        /// Queues `change`, or with `coalescing` merges it into the waiting
        /// change (see ``enqueue(_:sequence:coalescing:tellsOld:object:hop:mailbox:hasPending:)``);
        /// what the merge replaced (or `change`, dropped), and whether the
        /// mailbox's job must be scheduled.
        @inlinable @inline(__always)
        mutating func coalesceOrAppend(
            _ change: ObservedChange<Value>, sequence: UInt64, coalescing: Bool, hop: _AnyHop,
            mailbox: inout _Mailbox.State, hasPending: borrowing Atomic<Bool>
        ) -> (replaced: ObservedChange<Value>?, schedule: Bool) {
            var schedule = false
            if coalescing {
                // A queued `.initial` is told as it is: nothing merges into
                // it, and a prior after it announces a change of its own.
                if !isEmpty, items[items.count - 1]?.change.isInitial != true {
                    if change.isPrior {
                        priorAwaitsItsChange = true
                        return (change, false)
                    }
                    let last = items.count - 1
                    if let queued = items[last], !queued.change.isPrior {
                        priorAwaitsItsChange = false
                        // One write: one uniqueness check of the storage.
                        items[last] = Item(
                            ticket: queued.ticket,
                            change: ObservedChange(newValue: change.newValue, oldValue: queued.change.oldValue),
                            sequence: sequence != 0 ? sequence : queued.sequence)
                        return (queued.change, false)
                    }
                }
                if _slowPath(priorAwaitsItsChange) {
                    priorAwaitsItsChange = false
                    // The change its prior was dropped for was delivered
                    // meanwhile: this change is announced on its own.
                    if !change.isPrior {
                        let prior = ObservedChange<Value>(newValue: nil, oldValue: change.oldValue, isPrior: true)
                        schedule = append(prior, hop: hop, mailbox: &mailbox)
                    }
                }
            }
            if append(change, sequence: sequence, hop: hop, mailbox: &mailbox) { schedule = true }
            hasPending.store(true, ordering: .releasing)
            return (nil, schedule)
        }

        /// What the relation is told of `change` after its ``baseline``:
        /// nothing for a prior notification (held until its change) or for
        /// a change that brings the baseline's value, bit for bit (dropped,
        /// with a held prior: the relation was told that value); for any
        /// other change, the change and its held prior, if any, with the
        /// baseline as their old value (`tellsOld`: the relation asks for
        /// `.old`). The baseline then goes into `spent`, to release
        /// unlocked; but while another registrar mutation of the object
        /// (`object`'s stripe, beside the one this change may come from) is
        /// under way, it began perhaps before the relation existed, so that
        /// its change may come with no old value: the baseline becomes this
        /// change's new value, so that the relation's values keep chaining.
        @inlinable
        mutating func chainFromBaseline(
            _ change: ObservedChange<Value>, tellsOld: Bool, object: UnsafeMutableRawPointer,
            spent: inout _Baseline<Value>?
        ) -> (prior: ObservedChange<Value>?, change: ObservedChange<Value>)? {
            // Unwrapped: the caller checked it.
            let value = baseline.unsafelyUnwrapped.value
            if change.isPrior {
                baselineHoldsPrior = true
                return nil
            }
            let heldPrior = baselineHoldsPrior
            baselineHoldsPrior = false
            // The held prior announces this change: a prior dropped earlier
            // for a change that was waiting (``priorAwaitsItsChange``) is not
            // queued again in front of it.
            if heldPrior { priorAwaitsItsChange = false }
            // Bits, not `==` (user code, and this runs under the lock): the
            // `.initial` and the change read the same stored value, so a
            // change that brings it has its bits (a computed value of a
            // type that is not trivial may not: then it is told, chained).
            if let new = change.newValue, _hasSameBits(new, value) { return nil }
            spent = baseline.take()
            if let new = change.newValue, _MutationGauge.stripe(for: object).isBusy(besides: 1) {
                baseline = _Baseline(new)
            }
            let old = tellsOld ? value : nil
            return (
                heldPrior ? ObservedChange(newValue: nil, oldValue: old, isPrior: true) : nil,
                tellsOld ? ObservedChange(newValue: change.newValue, oldValue: old) : change
            )
        }

        /// After an `.initial` that told `value` and whose read may have
        /// seen a store numbered after it: the changes still queued (behind
        /// what it superseded) and their priors get, in turn, the value the
        /// relation was told last as their old value (`tellsOld`), and the
        /// value told last is kept as the ``baseline`` of the changes to
        /// come (`hasPending` stays set).
        @inlinable
        mutating func keepBaseline(_ value: Value, tellsOld: Bool, hasPending: borrowing Atomic<Bool>) {
            var last = value
            for index in head..<items.count {
                guard let item = items[index] else { continue }
                if tellsOld {
                    items[index]!.change = ObservedChange(
                        newValue: item.change.newValue, oldValue: last, isPrior: item.change.isPrior)
                }
                if !item.change.isPrior, let new = item.change.newValue { last = new }
            }
            baseline = _Baseline(last)
            hasPending.store(true, ordering: .releasing)
        }

        /// Appends `change` (numbered `sequence`, or 0), filed in `mailbox`
        /// if the relation is attached; whether the mailbox's job must be
        /// scheduled. Out of line: inlined, it made the enqueue too large
        /// for the caller's critical section to inline.
        @inlinable @inline(never)
        mutating func append(
            _ change: ObservedChange<Value>, sequence: UInt64 = 0, hop: _AnyHop, mailbox: inout _Mailbox.State
        ) -> Bool {
            guard relation != nil else {
                items.append(Item(ticket: 0, change: change, sequence: sequence))
                return false
            }
            let (ticket, schedule) = mailbox.post(hop)
            items.append(Item(ticket: ticket, change: change, sequence: sequence))
            return schedule
        }

        /// Records the relation and files the changes queued before it;
        /// whether the mailbox's job must be scheduled.
        @inlinable
        mutating func attach(_ relation: _RelationReference?, hop: _AnyHop, mailbox: inout _Mailbox.State)
            -> Bool
        {
            defer { _checkInvariants(mailbox) }
            self.relation = relation
            var schedule = false
            for index in head..<items.count {
                let (ticket, scheduled) = mailbox.post(hop)
                items[index]!.ticket = ticket
                if scheduled { schedule = true }
            }
            return schedule
        }

        /// The oldest queued change, moved out, if it is the one filed as
        /// `ticket` (any, when `ticket` is `nil`: the actor itself delivers
        /// what is queued before its own change); `nil` when the queue is
        /// empty, that change was delivered already, or the relation is not
        /// attached yet.
        @inlinable
        mutating func next(ticket: UInt64?, hasPending: borrowing Atomic<Bool>) -> ObservedChange<Value>? {
            guard !isEmpty, relation != nil else { return nil }
            if items.count == 1 {
                // One change queued (a producer that waits for each
                // delivery): popped, with nothing left to empty.
                if let ticket, items[0]?.ticket != ticket { return nil }
                clearPending(hasPending)
                // Unwrapped: the one slot at `head` is filled.
                return items.removeLast().unsafelyUnwrapped.change
            }
            guard let item = items[head].take() else { return nil }
            if let ticket, item.ticket != ticket {
                items[head] = item
                return nil
            }
            head += 1
            if isEmpty {
                // Only `nil` slots are released here.
                items._empty(keepingCapacity: items.capacity <= 16)
                head = 0
                clearPending(hasPending)
            }
            return item.change
        }

        /// Moves out, into `buffer` from its start, the queued changes filed
        /// as consecutive tickets from `ticket`, as many as fit (and at most
        /// `limit`); returns how many. None when the oldest queued change was
        /// filed otherwise (its ticket was delivered already) or the
        /// relation is not attached yet.
        /// Changes at the front of the run that are no longer queued (an
        /// `.initial` told on the actor superseded them, see
        /// ``dropSuperseded(first:through:by:unsure:hasPending:)``) are skipped: `skipped`
        /// says how many.
        @inlinable
        mutating func take(
            from ticket: UInt64, limit: Int, into buffer: UnsafeMutableBufferPointer<ObservedChange<Value>>,
            skipped: inout Int, hasPending: borrowing Atomic<Bool>
        ) -> Int {
            guard relation != nil else { return 0 }
            var ticket = ticket
            var limit = limit
            if head < items.count, let first = items[head]?.ticket, first > ticket, first < ticket &+ UInt64(limit) {
                skipped = Int(first - ticket)
                ticket = first
                limit -= skipped
            }
            var taken = 0
            while taken < min(limit, buffer.count), head < items.count,
                items[head]?.ticket == ticket &+ UInt64(taken)
            {
                // Unwrapped: the slot at `head` was just found filled.
                (buffer.baseAddress! + taken).initialize(to: items[head].take().unsafelyUnwrapped.change)
                head += 1
                taken += 1
            }
            if taken > 0, isEmpty {
                // Only `nil` slots are released here. `hasPending` stays set
                // while the batch is delivered (see ``endBatch(hasPending:)``).
                items._empty(keepingCapacity: items.capacity <= 16)
                head = 0
            }
            if taken == 0, isEmpty { clearPending(hasPending) }
            return taken
        }

        /// A batch ``take(from:limit:into:hasPending:)`` took was delivered:
        /// `hasPending` is cleared if nothing is queued.
        @inlinable
        mutating func endBatch(hasPending: borrowing Atomic<Bool>) {
            if isEmpty { clearPending(hasPending) }
        }

        /// Whether the relation was told a change numbered after `sequence`
        /// (``_Relation/lastChange``). Called only during a delivery of the
        /// relation (see ``_Deliver``), which holds it: so it is read
        /// through its address, without a retain (a release here, under
        /// the lock, could run its deinit). Mutating only so that the
        /// reference is borrowed where it is stored (see ``loadRelation()``).
        @inlinable
        mutating func relationWasToldAfter(_ sequence: UInt64) -> Bool {
            guard let address = relation?.reference.address else { return false }
            return _lastChange(ofRelationAt: address) > sequence
        }

        /// How many changes are queued.
        @inlinable
        var count: Int { items.count - head }

        /// An `.initial` told on the actor during registration supersedes the
        /// oldest `count` queued changes (queued before it read the value,
        /// so that value includes them), those numbered up to `stored`
        /// (numbered before the read: queued ones are in number order, see
        /// ``enqueue(_:sequence:coalescing:tellsOld:object:hop:mailbox:hasPending:)``),
        /// and then those whose new value has the bits of `value` (compared
        /// by bits: `==` is user code, and this runs under the lock): they
        /// are removed, and returned to release unlocked. Their mailbox
        /// entries are skipped when their turn comes. So is every change
        /// numbered up to `stored` still on its way here.
        ///
        /// A prior notification goes with its change, the next one queued,
        /// whatever its own place: queued before the read, it may announce a
        /// change stored after it. The last one queued, whose change is yet
        /// to come, is held (``baselineHoldsPrior``) when the read may have
        /// seen a store numbered after it (`unsure`: a ``baseline`` follows),
        /// so that it goes with its change; otherwise it stays if it was
        /// queued after the read began (its change is numbered after the
        /// `.initial`), and is dropped if it was queued before (its change
        /// came already, and was superseded or dropped).
        @inlinable
        mutating func dropSuperseded(
            first count: Int, through stored: UInt64, by value: Value, unsure: Bool,
            hasPending: borrowing Atomic<Bool>
        ) -> ContiguousArray<Item?> {
            supersededThrough = Swift.max(supersededThrough, stored)
            var dropped: ContiguousArray<Item?> = []
            // `offset`: the item's place in the queue when the call began.
            func isSuperseded(_ item: Item, at offset: Int) -> Bool {
                offset < count || (item.sequence != 0 && item.sequence <= stored)
                    || (!item.change.isPrior && item.change.newValue.map { _hasSameBits($0, value) } == true)
            }
            if unsure, !isEmpty, items[items.count - 1]?.change.isPrior == true {
                baselineHoldsPrior = true
                dropped.append(items.removeLast())
            }
            var offset = 0
            while head < items.count, let item = items[head] {
                let superseded =
                    if item.change.isPrior, head + 1 < items.count, let next = items[head + 1], !next.change.isPrior {
                        isSuperseded(next, at: offset + 1)
                    } else {
                        isSuperseded(item, at: offset)
                    }
                guard superseded else { break }
                dropped.append(items[head].take())
                head += 1
                offset += 1
            }
            if isEmpty {
                items._empty(keepingCapacity: items.capacity <= 16)
                head = 0
                clearPending(hasPending)
            }
            return dropped
        }

        /// Puts `change` in front of the queued changes, before the relation
        /// is attached (so that none is filed yet).
        @inlinable
        mutating func prependUnfiled(_ change: ObservedChange<Value>, hasPending: borrowing Atomic<Bool>) {
            #if SAFEOBSERVE_INTERNAL_CHECKS
                precondition(relation == nil, "_Hop: a change put in front of filed ones")
            #endif
            items.insert(Item(ticket: 0, change: change), at: head)
            hasPending.store(true, ordering: .releasing)
        }

        /// Empties the queue, returning what it held (to release unlocked).
        @inlinable
        mutating func removeAll(hasPending: borrowing Atomic<Bool>) -> (ContiguousArray<Item?>, _Baseline<Value>?) {
            defer {
                items = []
                head = 0
                baselineHoldsPrior = false
                hasPending.store(false, ordering: .releasing)
            }
            return (items, baseline.take())
        }
    }
}

/// The value an `.initial` told whose read may have seen a store whose
/// change comes after it (see ``_Hop/Queue/baseline``). A box, so that the
/// queue of every hop grows by a word, not by a value.
@usableFromInline
final class _Baseline<Value> {
    @usableFromInline let value: Value

    @usableFromInline
    init(_ value: Value) { self.value = value }
}
