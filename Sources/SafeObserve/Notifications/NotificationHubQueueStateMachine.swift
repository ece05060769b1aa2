extension NotificationHub.Queue {
    /// A queued notification.
    struct Entry: Sendable {
        let nameID: Int
        let sender: _UnretainedReference?
        /// Posts the notification, from the sender if it has one.
        let post: @Sendable (AnyObject?) -> Void

        init(nameID: Int, sender: _UnretainedReference?, post: @escaping @Sendable (AnyObject?) -> Void) {
            self.nameID = nameID
            self.sender = sender
            self.post = post
        }

        /// Whether this entry matches (`nameID`, `sender`, which the
        /// caller holds) as
        /// `coalescing` says (an empty `coalescing` matches nothing).
        func matches(_ nameID: Int, _ sender: AnyObject?, _ coalescing: Coalescing) -> Bool {
            guard !coalescing.isEmpty else { return false }
            if coalescing.contains(.onName), self.nameID != nameID { return false }
            if coalescing.contains(.onSender) {
                switch (self.sender, sender) {
                case (nil, nil): break
                case (let queued?, let sender?):
                    // The address first; then not a dead sender's at a reused address.
                    guard queued.address == Unmanaged.passUnretained(sender).toOpaque(), queued.refers(to: sender)
                    else { return false }
                default: return false
                }
            }
            return true
        }
    }

    /// The queued notifications and whether a job will post them. Its
    /// transitions never release a value under the lock: what they
    /// replace or remove is returned.
    struct State {
        var asap: [Entry] = []
        var idle: [Entry] = []
        var asapScheduled = false
        var idleScheduled = false

        /// A queued notification always has a job coming for it (under
        /// `SAFEOBSERVE_INTERNAL_CHECKS`, after each transition).
        func _checkInvariants() {
            #if SAFEOBSERVE_INTERNAL_CHECKS
                precondition(asap.isEmpty || asapScheduled, "NotificationHub.Queue: asap entries and no job")
                precondition(idle.isEmpty || idleScheduled, "NotificationHub.Queue: idle entries and no job")
            #endif
        }

        /// What to do after unlocking, once an entry was enqueued.
        struct EnqueueOutcome {
            /// Entries removed or replaced, to release.
            var released: [Entry] = []
            /// Post the notification now.
            var postsNow = false
            /// Schedule the job for this style.
            var schedules: PostingStyle?
        }

        /// Enqueues `entry` (from `sender`, which the caller holds).
        ///
        /// A queued entry that matches is replaced by `entry`, in its
        /// place, except that an `asap` entry matching a `whenIdle`
        /// one replaces it at the end of the `asap` list (it must not
        /// wait for idle); a `now` entry removes every match.
        mutating func enqueue(
            _ entry: Entry, from sender: AnyObject?, style: PostingStyle, coalescing: Coalescing
        ) -> EnqueueOutcome {
            defer { _checkInvariants() }
            var outcome = EnqueueOutcome()
            let matches = { (queued: Entry) in queued.matches(entry.nameID, sender, coalescing) }
            switch style {
            case .now:
                outcome.released = removeAll(matching: entry.nameID, sender: sender, coalescing: coalescing)
                outcome.postsNow = true
                return outcome
            case .asap:
                if let index = asap.firstIndex(where: matches) {
                    outcome.released = [asap[index]]
                    asap[index] = entry
                    return outcome
                }
                if let index = idle.firstIndex(where: matches) { outcome.released = [idle.remove(at: index)] }
                asap.append(entry)
                if !asapScheduled {
                    asapScheduled = true
                    outcome.schedules = .asap
                }
                return outcome
            case .whenIdle:
                if let index = asap.firstIndex(where: matches) {
                    outcome.released = [asap[index]]
                    asap[index] = entry
                    return outcome
                }
                if let index = idle.firstIndex(where: matches) {
                    outcome.released = [idle[index]]
                    idle[index] = entry
                    return outcome
                }
                idle.append(entry)
                if !idleScheduled {
                    idleScheduled = true
                    outcome.schedules = .whenIdle
                }
                return outcome
            }
        }

        /// Removes and returns the queued notifications matching.
        mutating func removeAll(matching nameID: Int, sender: AnyObject?, coalescing: Coalescing) -> [Entry] {
            defer { _checkInvariants() }
            var removed: [Entry] = []
            for index in asap.indices.reversed() where asap[index].matches(nameID, sender, coalescing) {
                removed.append(asap.remove(at: index))
            }
            for index in idle.indices.reversed() where idle[index].matches(nameID, sender, coalescing) {
                removed.append(idle.remove(at: index))
            }
            return removed
        }

        /// The next notification queued with `style`; `nil` when there
        /// is none, which ends that style's job.
        mutating func next(_ style: PostingStyle) -> Entry? {
            defer { _checkInvariants() }
            switch style {
            case .now:
                return nil
            case .asap:
                guard !asap.isEmpty else {
                    asapScheduled = false
                    return nil
                }
                return asap.removeFirst()
            case .whenIdle:
                guard !idle.isEmpty else {
                    idleScheduled = false
                    return nil
                }
                return idle.removeFirst()
            }
        }
    }
}
