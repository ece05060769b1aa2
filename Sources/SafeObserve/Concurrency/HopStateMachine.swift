import Synchronization

extension _Hop {
    /// The queue and whether a job is scheduled. Transitions never release a
    /// value under the lock: what they replace or drop is returned.
    @usableFromInline
    struct State {
        /// Queued changes from `head` on; delivered slots are `nil`.
        @usableFromInline var queue: ContiguousArray<ObservedChange<Value>?> = []
        @usableFromInline var head = 0
        /// A job is scheduled, or running, and will deliver the queue.
        @usableFromInline var isScheduled = false
        /// The relation, once registered (see ``attach(_:)``).
        @usableFromInline var relation: _RelationReference?

        @usableFromInline
        init() {}

        /// Queued changes have a job coming, unless the relation is not
        /// attached yet (attaching schedules one); checked after each
        /// transition under `SAFEOBSERVE_INTERNAL_CHECKS`.
        @inlinable
        func _checkInvariants() {
            #if SAFEOBSERVE_INTERNAL_CHECKS
                precondition(isEmpty || isScheduled || relation == nil, "_Hop: queued changes and no job")
                precondition(head <= queue.count, "_Hop: head past the queue")
            #endif
        }

        @usableFromInline
        enum EnqueueAction {
            /// Nothing to do after unlocking but release `replaced`.
            case none(replaced: ObservedChange<Value>?)
            /// Schedule the job.
            case schedule
        }

        @inlinable
        var isEmpty: Bool { head == queue.count }

        /// Records the relation; `true` if a job must now be scheduled for
        /// changes queued before.
        @inlinable
        mutating func attach(_ relation: _RelationReference?) -> Bool {
            defer { _checkInvariants() }
            self.relation = relation
            guard !isEmpty, !isScheduled else { return false }
            isScheduled = true
            return true
        }

        /// Queues `change`; with `coalescing`, merges it into a queued change
        /// instead (the first old value and the latest new value), and drops
        /// a prior notification while a change is queued (it already
        /// announced the merged change, or was not asked for).
        @inlinable
        mutating func enqueue(
            _ change: ObservedChange<Value>, coalescing: Bool, hasPending: borrowing Atomic<Bool>
        ) -> EnqueueAction {
            defer { _checkInvariants() }
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
        /// empty or the relation is not attached yet, which also ends the
        /// job if `endingJob`.
        @inlinable
        mutating func next(endingJob: Bool, hasPending: borrowing Atomic<Bool>) -> ObservedChange<Value>? {
            defer { _checkInvariants() }
            guard !isEmpty, relation != nil else {
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
        @inlinable
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
