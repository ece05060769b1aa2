extension _Mailbox {
    /// Deliveries waiting in the mailbox: a run of consecutive ones of one
    /// hop, the queued changes with tickets `firstTicket..<firstTicket + count`
    /// (a burst of changes for one relation is one entry).
    @usableFromInline
    struct Entry: Sendable {
        /// Never keeps the hop (and so its handler) alive: a hop whose
        /// relation ended meanwhile is gone when the entry's turn comes.
        @usableFromInline let hop: _UnretainedReference
        /// The hop's address, loaded without copying `hop` (a copy of an
        /// unowned reference counts the allocation once more, and back);
        /// valid while `hop` keeps the allocation.
        let handle: _UnretainedHandle
        @usableFromInline var firstTicket: UInt64
        @usableFromInline var count: Int

        @usableFromInline
        init(hop: _UnretainedReference, firstTicket: UInt64) {
            self.hop = hop
            handle = _UnretainedHandle(hop)
            self.firstTicket = firstTicket
            count = 1
        }
    }

    /// The order of the deliveries waiting for the executor, and whether a
    /// job is on its way to deliver them. Transitions return what to do;
    /// nothing is released or called under the lock.
    @usableFromInline
    struct State {
        /// Waiting deliveries from `head` on, in the order they were queued.
        @usableFromInline var entries: ContiguousArray<Entry> = []
        @usableFromInline var head = 0
        /// A job is scheduled or running, and will deliver every entry.
        @usableFromInline var isScheduled = false
        /// The next ticket: tickets tell a waiting change from one that took
        /// its place (delivered early, on the executor itself).
        @usableFromInline var nextTicket: UInt64 = 1

        @usableFromInline
        init() {}

        @inlinable
        var isEmpty: Bool { head == entries.count }

        /// The ticket of the oldest waiting delivery (``nextTicket`` when
        /// none waits).
        @inlinable
        var oldestTicket: UInt64 { isEmpty ? nextTicket : entries[head].firstTicket }

        /// Entries waiting imply a job: checked after each transition under
        /// `SAFEOBSERVE_INTERNAL_CHECKS`.
        @inlinable
        func _checkInvariants() {
            #if SAFEOBSERVE_INTERNAL_CHECKS
                precondition(isEmpty || isScheduled, "_Mailbox: entries waiting and no job")
                precondition(head <= entries.count, "_Mailbox: head past the entries")
            #endif
        }

        /// Files a delivery of `hop`'s; returns its ticket, and whether a job
        /// must now be scheduled.
        @usableFromInline
        mutating func post(_ hop: _AnyHop) -> (ticket: UInt64, schedule: Bool) {
            defer { _checkInvariants() }
            let ticket = nextTicket
            nextTicket &+= 1
            let address = Unmanaged.passUnretained(hop).toOpaque()
            if head < entries.count, entries[entries.count - 1].hop.address == address,
                entries[entries.count - 1].hop.refers(to: hop)
            {
                // The previous delivery is this hop's: its run grows.
                entries[entries.count - 1].count += 1
            } else {
                entries.append(Entry(hop: _UnretainedReference(hop), firstTicket: ticket))
            }
            guard !isScheduled else { return (ticket, false) }
            isScheduled = true
            return (ticket, true)
        }

        /// What the job does next (see ``next(before:)``).
        @usableFromInline
        enum Next {
            /// Delivers the run: its hop, loaded (`nil` if it died; drop it
            /// after unlocking), first ticket and length.
            case run(hop: AnyObject?, firstTicket: UInt64, count: Int)
            /// Nothing is left: the job ended.
            case ended
            /// The next ticket is not before the bound: the batch ends, and
            /// the job goes on (a new job, or the next batch).
            case bounded
        }

        /// The oldest run of waiting deliveries with tickets before `bound`
        /// (all of it when `bound` is `nil`), or, when none is left, the end
        /// of the job (then a delivery filed from now on schedules a new
        /// one), or the end of the batch.
        @usableFromInline
        mutating func next(before bound: UInt64?) -> Next {
            defer { _checkInvariants() }
            guard !isEmpty else {
                isScheduled = false
                return .ended
            }
            let first = entries[head].firstTicket
            var count = entries[head].count
            if let bound {
                guard first < bound else { return .bounded }
                count = min(count, Int(bound - first))
            }
            let run = Next.run(hop: entries[head].handle.load(), firstTicket: first, count: count)
            if count < entries[head].count {
                // The rest of the run was queued after the batch began.
                entries[head].firstTicket = first &+ UInt64(count)
                entries[head].count -= count
                return run
            }
            head += 1
            if isEmpty {
                entries._empty(keepingCapacity: entries.capacity <= 64)
                head = 0
            }
            return run
        }

        /// Every waiting delivery, taken (the actor died: none can run).
        mutating func removeAll() -> ContiguousArray<Entry> {
            defer {
                entries = []
                head = 0
                isScheduled = false
                _checkInvariants()
            }
            return ContiguousArray(entries[head...])
        }
    }
}
