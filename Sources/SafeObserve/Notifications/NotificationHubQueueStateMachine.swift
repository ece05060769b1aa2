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

        /// The sender's address, as the indexes file it (0: no sender).
        var senderKey: Int { sender.map { Int(bitPattern: $0.address) } ?? 0 }

        /// Whether this entry's sender is `sender`, which the caller holds
        /// (both none also matches). Safe under the lock.
        func isFrom(_ sender: AnyObject?) -> Bool {
            switch (self.sender, sender) {
            case (nil, nil): true
            // The address first; then not a dead sender's at a reused address.
            case (let queued?, let sender?):
                queued.address == Unmanaged.passUnretained(sender).toOpaque() && queued.refers(to: sender)
            default: false
            }
        }
    }

    /// The queued notifications, the jobs that will post them and the tasks
    /// waiting for them: a state machine whose transitions never release a
    /// value or resume a task under the lock, but return what to do after
    /// unlocking.
    ///
    /// Each posting style keeps its notifications in a ``Line``, in order,
    /// numbered as they are enqueued. Coalescing finds the matches through
    /// indexes by name, by sender and by both (built when a line is long,
    /// dropped when the queue empties), so that every transition costs O(1)
    /// amortized per notification enqueued, removed or posted, whatever is
    /// pending.
    struct State {
        var asap = Line()
        var idle = Line()
        var asapScheduled = false
        var idleScheduled = false
        /// The number of the notification each style's job is posting (it
        /// is done when the job asks for the next one).
        var asapPosting: UInt64?
        var idlePosting: UInt64?
        var indexes = Indexes()
        var waiters = Waiters()

        /// The notifications waiting to be posted.
        var count: Int { asap.count + idle.count }

        /// A queued notification always has a job coming for it, and the
        /// lines and the indexes file exactly the queued notifications
        /// (under `SAFEOBSERVE_INTERNAL_CHECKS`, after each transition; the
        /// O(n) checks while the lines are short, so that the checks stay
        /// O(1) per transition).
        func _checkInvariants() {
            #if SAFEOBSERVE_INTERNAL_CHECKS
                precondition(asap.isEmpty || asapScheduled, "NotificationHub.Queue: asap entries and no job")
                precondition(idle.isEmpty || idleScheduled, "NotificationHub.Queue: idle entries and no job")
                if asap.span <= 64, idle.span <= 64 {
                    asap._checkInvariants()
                    idle._checkInvariants()
                    indexes._checkInvariants(filing: self)
                }
            #endif
        }

        // MARK: Transitions

        /// What to do after unlocking, once an entry was enqueued.
        struct EnqueueAction {
            /// Entries removed by coalescing, to release.
            var released: [Entry] = []
            /// Post the notification now.
            var postsNow = false
            /// Schedule the job for this style.
            var schedules: PostingStyle?
            /// Waiters whose notifications are all gone, to resume.
            var resumes: [CheckedContinuation<Void, Never>] = []
        }

        /// Enqueues `entry` (from `sender`, which the caller holds), as
        /// Foundation's `NotificationQueue` does: every queued notification
        /// that `coalescing` matches is removed, whatever its style; then
        /// `entry` is appended to its style's line (or, for `now`, posted).
        mutating func enqueue(
            _ entry: Entry, from sender: AnyObject?, style: PostingStyle, coalescing: Coalescing
        ) -> EnqueueAction {
            defer { _checkInvariants() }
            var action = EnqueueAction()
            if !coalescing.isEmpty {
                action.released = removeAll(matching: entry.nameID, sender: sender, coalescing: coalescing)
                action.resumes = waiters.resumable(done: done)
            }
            switch style {
            case .now:
                action.postsNow = true
            case .asap:
                let number = asap.append(entry)
                indexes.file(entry, as: Ticket(style: .asap, number: number))
                if !asapScheduled {
                    asapScheduled = true
                    action.schedules = .asap
                }
            case .whenIdle:
                let number = idle.append(entry)
                indexes.file(entry, as: Ticket(style: .whenIdle, number: number))
                if !idleScheduled {
                    idleScheduled = true
                    action.schedules = .whenIdle
                }
            }
            return action
        }

        /// What to do after unlocking, once queued entries were removed.
        struct RemoveAction {
            /// The removed entries, to release.
            var released: [Entry]
            /// Waiters whose notifications are all gone, to resume.
            var resumes: [CheckedContinuation<Void, Never>]
        }

        /// Removes the queued notifications matching (`nameID`, `sender`,
        /// which the caller holds) as `coalescing` says.
        mutating func dequeue(matching nameID: Int, sender: AnyObject?, coalescing: Coalescing) -> RemoveAction {
            defer { _checkInvariants() }
            let released = removeAll(matching: nameID, sender: sender, coalescing: coalescing)
            return RemoveAction(released: released, resumes: waiters.resumable(done: done))
        }

        /// What to do after unlocking, when a job asks for the next
        /// notification to post.
        struct NextAction {
            /// The notification to post; `nil` ends the job.
            var entry: Entry?
            /// The job ended at its bound with notifications still queued
            /// (a handler enqueued them): schedule another job for them,
            /// behind the actor's other work.
            var reschedules = false
            /// Waiters whose notifications are all gone, to resume.
            var resumes: [CheckedContinuation<Void, Never>]
        }

        /// The number the next notification queued with `style` will get,
        /// but at most ``postsPerJob`` past the first one queued: a job posts
        /// only those numbered below it when it starts. What was queued when
        /// a job started grows with how long the previous one ran while
        /// other threads kept enqueueing faster than the actor posts; so the
        /// actor's other work waits for at most that many posts.
        func bound(_ style: PostingStyle) -> UInt64 {
            (style == .whenIdle ? idle : asap).endNumber(atMost: Self.postsPerJob)
        }

        /// How many queued notifications (coalesced ones included) one job
        /// takes at most.
        static let postsPerJob: UInt64 = 1_024

        /// The next notification queued with `style` before the job's
        /// `bound`; `nil` when there is none, which ends that style's job
        /// (and asks for another if notifications were queued since it
        /// started). The notification the job posted before (the job asks
        /// once it is posted) is done.
        mutating func next(_ style: PostingStyle, before bound: UInt64 = .max) -> NextAction {
            defer { _checkInvariants() }
            var entry: Entry?
            var reschedules = false
            switch style {
            case .now:
                break
            case .asap:
                if asap.firstNumber < bound, let (number, first) = asap.removeFirst() {
                    indexes.unfile(first, as: Ticket(style: .asap, number: number))
                    asapPosting = number
                    entry = first
                } else {
                    asapPosting = nil
                    // Queued since the job started: another job posts them.
                    reschedules = !asap.isEmpty
                    asapScheduled = reschedules
                }
            case .whenIdle:
                if idle.firstNumber < bound, let (number, first) = idle.removeFirst() {
                    indexes.unfile(first, as: Ticket(style: .whenIdle, number: number))
                    idlePosting = number
                    entry = first
                } else {
                    idlePosting = nil
                    reschedules = !idle.isEmpty
                    idleScheduled = reschedules
                }
            }
            if asap.isEmpty, idle.isEmpty { indexes = Indexes() }  // memory follows what is queued
            return NextAction(entry: entry, reschedules: reschedules, resumes: waiters.resumable(done: done))
        }

        /// What a waiter waits for: every notification numbered below
        /// `asap` and `idle` posted or removed.
        var done: Waiters.Marks {
            Waiters.Marks(
                asap: asapPosting ?? asap.firstNumber,
                idle: idlePosting ?? idle.firstNumber)
        }

        /// Registers a waiter for what is queued now (or in a job's hands);
        /// returns `continuation` to resume at once when nothing is, or when
        /// the task is already cancelled.
        mutating func wait(
            _ id: UInt64, isCancelled: Bool, _ continuation: CheckedContinuation<Void, Never>
        ) -> CheckedContinuation<Void, Never>? {
            let target = Waiters.Marks(asap: asap.endNumber, idle: idle.endNumber)
            guard !isCancelled, !done.reached(target) else { return continuation }
            waiters.append(id, target: target, continuation)
            return nil
        }

        /// Removes a cancelled waiter; returns its continuation to resume,
        /// unless it was resumed already.
        mutating func cancelWaiter(_ id: UInt64) -> CheckedContinuation<Void, Never>? {
            waiters.remove(id)
        }

        /// Removes and returns the queued notifications matching.
        ///
        /// - Complexity: O(matches) amortized: a line up to ``Indexes/scanLimit``
        ///   long is scanned, a longer one is looked up in an index.
        private mutating func removeAll(matching nameID: Int, sender: AnyObject?, coalescing: Coalescing) -> [Entry] {
            guard !coalescing.isEmpty, !(asap.isEmpty && idle.isEmpty) else { return [] }
            let kind = Indexes.Kind(coalescing)
            let senderKey = sender.map { Int(bitPattern: Unmanaged.passUnretained($0).toOpaque()) } ?? 0
            let matches = { (entry: Entry) in
                (kind == .sender || entry.nameID == nameID) && (kind == .name || entry.isFrom(sender))
            }
            var tickets: [Ticket] = []
            if asap.span <= Indexes.scanLimit, idle.span <= Indexes.scanLimit {
                asap.forEachQueued { number, entry in
                    if matches(entry) { tickets.append(Ticket(style: .asap, number: number)) }
                }
                idle.forEachQueued { number, entry in
                    if matches(entry) { tickets.append(Ticket(style: .whenIdle, number: number)) }
                }
            } else {
                if !indexes.isBuilt(kind) {
                    indexes.build(kind) { file in
                        asap.forEachQueued { number, entry in file(entry, Ticket(style: .asap, number: number)) }
                        idle.forEachQueued { number, entry in file(entry, Ticket(style: .whenIdle, number: number)) }
                    }
                }
                indexes.forEachTicket(kind, nameID: nameID, senderKey: senderKey) { ticket in
                    let entry = ticket.style == .asap ? asap[ticket.number] : idle[ticket.number]
                    if let entry, matches(entry) { tickets.append(ticket) }
                }
            }
            var removed: [Entry] = []
            removed.reserveCapacity(tickets.count)
            for ticket in tickets {
                let entry =
                    ticket.style == .asap ? asap.remove(ticket.number) : idle.remove(ticket.number)
                // Unwrapped: every ticket was found queued above.
                indexes.unfile(entry.unsafelyUnwrapped, as: ticket)
                removed.append(entry.unsafelyUnwrapped)
            }
            if asap.isEmpty, idle.isEmpty { indexes = Indexes() }
            return removed
        }
    }
}

// MARK: - Lines

extension NotificationHub.Queue {
    /// The notifications of one posting style, in the order they were
    /// enqueued, each numbered (from 0, in that order) so that it can be
    /// removed in O(1) wherever it stands: a removed one leaves a hole that
    /// the front skips, and the storage is compacted once the front has
    /// passed half of it.
    struct Line {
        /// `slots[i]` holds notification number `base + i`, or `nil` once
        /// it was removed.
        private var slots: ContiguousArray<Entry?> = []
        /// The number of `slots[0]`.
        private var base: UInt64 = 0
        /// The index of the first notification still queued (`slots.count`
        /// when none is).
        private var head = 0
        /// The notifications still queued.
        private(set) var count = 0

        var isEmpty: Bool { count == 0 }

        /// The number of the first notification still queued (``endNumber``
        /// when none is).
        var firstNumber: UInt64 { base + UInt64(head) }

        /// The number the next notification will get.
        var endNumber: UInt64 { base + UInt64(slots.count) }

        /// ``endNumber``, but at most `limit` past ``firstNumber``.
        func endNumber(atMost limit: UInt64) -> UInt64 { Swift.min(endNumber, firstNumber &+ limit) }

        /// The slots from the first queued notification to the last one,
        /// holes included: what a scan visits.
        var span: Int { slots.count - head }

        /// Appends `entry`; returns its number.
        ///
        /// - Complexity: Amortized O(1).
        mutating func append(_ entry: Entry) -> UInt64 {
            let number = endNumber
            slots.append(entry)
            count += 1
            return number
        }

        /// The queued notification numbered `number`, if it still is.
        subscript(number: UInt64) -> Entry? {
            guard number >= firstNumber, number < endNumber else { return nil }
            return slots[Int(number - base)]
        }

        /// Removes the notification numbered `number`, if still queued.
        ///
        /// - Complexity: Amortized O(1).
        mutating func remove(_ number: UInt64) -> Entry? {
            guard number >= firstNumber, number < endNumber else { return nil }
            let index = Int(number - base)
            guard let entry = slots[index] else { return nil }
            slots[index] = nil
            count -= 1
            if index == head { skipHoles() }
            return entry
        }

        /// Removes and returns the first queued notification, with its number.
        ///
        /// - Complexity: Amortized O(1).
        mutating func removeFirst() -> (UInt64, Entry)? {
            guard head < slots.count, let entry = slots[head] else { return nil }
            let number = firstNumber
            slots[head] = nil
            count -= 1
            skipHoles()
            return (number, entry)
        }

        /// Calls `body` with each queued notification and its number, in order.
        ///
        /// - Complexity: O(``span``).
        func forEachQueued(_ body: (UInt64, Entry) -> Void) {
            for index in head..<slots.count {
                if let entry = slots[index] { body(base + UInt64(index), entry) }
            }
        }

        /// Moves `head` past the holes in front; compacts or frees the
        /// storage when the front has passed much of it (each slot is passed
        /// once and moved at most once per compaction that halves the
        /// line: amortized O(1)).
        private mutating func skipHoles() {
            while head < slots.count, slots[head] == nil { head += 1 }
            if head == slots.count {
                // Empty: start over, giving back storage a peak left.
                base = endNumber
                head = 0
                slots.removeAll(keepingCapacity: slots.capacity <= 64)
            } else if head >= 32, head * 2 >= slots.count {
                base += UInt64(head)
                if slots.capacity > 64, slots.capacity > 4 * (slots.count - head) {
                    slots = ContiguousArray(slots[head...])
                } else {
                    slots.removeFirst(head)
                }
                head = 0
            }
        }

        /// `head` is at a queued notification or at the end, and `count`
        /// matches (tests and `_checkInvariants`).
        func _checkInvariants() {
            precondition(head == slots.count || slots[head] != nil, "NotificationHub.Queue: a hole at the front")
            precondition(
                slots[head...].reduce(0) { $0 + ($1 == nil ? 0 : 1) } == count,
                "NotificationHub.Queue: count \(count) is not the queued notifications")
        }
    }

    /// A queued notification's identity: its style's line and its number there.
    struct Ticket: Hashable {
        /// The style (`asap` or `whenIdle`) in the top bit, the number below.
        private let bits: UInt64

        init(style: PostingStyle, number: UInt64) {
            bits = number | (style == .whenIdle ? 1 << 63 : 0)
        }

        var style: PostingStyle { bits >> 63 == 1 ? .whenIdle : .asap }
        var number: UInt64 { bits & ~(1 << 63) }
    }
}

// MARK: - Indexes

extension NotificationHub.Queue {
    /// The queued notifications by name, by sender, and by both, so that
    /// coalescing finds its matches without visiting the others.
    ///
    /// Built only when needed: while the lines are short a scan costs less
    /// than keeping an index, and a queue that never coalesces never builds
    /// one. An index built while the queue is busy stays up to date until
    /// the queue empties, and is dropped then (its memory with it). Building
    /// one visits what is queued, once per kind per busy period: amortized
    /// O(1) per notification.
    struct Indexes {
        /// Lines up to this long are scanned instead.
        static let scanLimit = 32

        /// What a coalescing mask matches on.
        enum Kind {
            case name, sender, both

            init(_ coalescing: Coalescing) {
                switch (coalescing.contains(.onName), coalescing.contains(.onSender)) {
                case (true, true): self = .both
                case (true, false): self = .name
                default: self = .sender
                }
            }
        }

        /// The name and the sender's address (0: none) of a notification.
        struct NameAndSender: Hashable {
            let nameID: Int
            let senderKey: Int
        }

        private var byName: [Int: Tickets]?
        private var bySender: [Int: Tickets]?
        private var byBoth: [NameAndSender: Tickets]?

        func isBuilt(_ kind: Kind) -> Bool {
            switch kind {
            case .name: byName != nil
            case .sender: bySender != nil
            case .both: byBoth != nil
            }
        }

        /// Builds the index of `kind` from what `enumerate` files.
        mutating func build(_ kind: Kind, from enumerate: ((Entry, Ticket) -> Void) -> Void) {
            switch kind {
            case .name:
                var index: [Int: Tickets] = [:]
                enumerate { entry, ticket in index[entry.nameID, default: Tickets()].insert(ticket) }
                byName = index
            case .sender:
                var index: [Int: Tickets] = [:]
                enumerate { entry, ticket in index[entry.senderKey, default: Tickets()].insert(ticket) }
                bySender = index
            case .both:
                var index: [NameAndSender: Tickets] = [:]
                enumerate { entry, ticket in
                    index[NameAndSender(nameID: entry.nameID, senderKey: entry.senderKey), default: Tickets()]
                        .insert(ticket)
                }
                byBoth = index
            }
        }

        /// Files a newly queued notification in the indexes that are built.
        ///
        /// - Complexity: O(1) expected.
        mutating func file(_ entry: Entry, as ticket: Ticket) {
            if byName != nil { byName![entry.nameID, default: Tickets()].insert(ticket) }
            if byBoth != nil || bySender != nil {
                let senderKey = entry.senderKey
                if bySender != nil { bySender![senderKey, default: Tickets()].insert(ticket) }
                if byBoth != nil {
                    byBoth![NameAndSender(nameID: entry.nameID, senderKey: senderKey), default: Tickets()]
                        .insert(ticket)
                }
            }
        }

        /// Unfiles a notification that was posted or removed.
        ///
        /// - Complexity: O(1) expected.
        mutating func unfile(_ entry: Entry, as ticket: Ticket) {
            if byName != nil { Self.unfile(ticket, under: entry.nameID, in: &byName!) }
            if byBoth != nil || bySender != nil {
                let senderKey = entry.senderKey
                if bySender != nil { Self.unfile(ticket, under: senderKey, in: &bySender!) }
                if byBoth != nil {
                    Self.unfile(ticket, under: NameAndSender(nameID: entry.nameID, senderKey: senderKey), in: &byBoth!)
                }
            }
        }

        private static func unfile<Key: Hashable>(_ ticket: Ticket, under key: Key, in index: inout [Key: Tickets]) {
            guard let position = index.index(forKey: key) else { return }
            index.values[position].remove(ticket)
            if index.values[position].isEmpty { index.remove(at: position) }
        }

        /// Calls `body` with the tickets filed under the notification's
        /// key for `kind` (built).
        func forEachTicket(_ kind: Kind, nameID: Int, senderKey: Int, _ body: (Ticket) -> Void) {
            let tickets: Tickets?
            switch kind {
            case .name: tickets = byName?[nameID]
            case .sender: tickets = bySender?[senderKey]
            case .both: tickets = byBoth?[NameAndSender(nameID: nameID, senderKey: senderKey)]
            }
            tickets?.forEachTicket(body)
        }

        /// Every built index files exactly the queued notifications.
        func _checkInvariants(filing state: State) {
            var queued: [(Entry, Ticket)] = []
            state.asap.forEachQueued { queued.append(($1, Ticket(style: .asap, number: $0))) }
            state.idle.forEachQueued { queued.append(($1, Ticket(style: .whenIdle, number: $0))) }
            if let byName {
                precondition(byName.values.reduce(0) { $0 + $1.count } == queued.count, "NotificationHub.Queue: byName")
                for (entry, ticket) in queued { precondition(byName[entry.nameID]?.contains(ticket) == true) }
            }
            if let bySender {
                precondition(
                    bySender.values.reduce(0) { $0 + $1.count } == queued.count, "NotificationHub.Queue: bySender")
                for (entry, ticket) in queued { precondition(bySender[entry.senderKey]?.contains(ticket) == true) }
            }
            if let byBoth {
                precondition(byBoth.values.reduce(0) { $0 + $1.count } == queued.count, "NotificationHub.Queue: byBoth")
                for (entry, ticket) in queued {
                    let key = NameAndSender(nameID: entry.nameID, senderKey: entry.senderKey)
                    precondition(byBoth[key]?.contains(ticket) == true)
                }
            }
        }
    }

    /// The tickets filed under one key: usually one, stored inline.
    struct Tickets {
        private var one: Ticket?
        private var more: Set<Ticket>?

        var count: Int { (one == nil ? 0 : 1) + (more?.count ?? 0) }
        var isEmpty: Bool { one == nil && (more?.isEmpty ?? true) }

        mutating func insert(_ ticket: Ticket) {
            if one == nil {
                one = ticket
            } else {
                more = more ?? []
                more!.insert(ticket)
            }
        }

        mutating func remove(_ ticket: Ticket) {
            if one == ticket {
                one = more?.popFirst()
            } else {
                more?.remove(ticket)
            }
            if more?.isEmpty == true { more = nil }
        }

        func contains(_ ticket: Ticket) -> Bool { one == ticket || more?.contains(ticket) == true }

        func forEachTicket(_ body: (Ticket) -> Void) {
            if let one { body(one) }
            more?.forEach(body)
        }
    }
}

// MARK: - Waiters

extension NotificationHub.Queue {
    /// The tasks waiting in ``NotificationHub/Queue/waitUntilPosted()``, in
    /// the order they started waiting, each for the notifications queued
    /// then: since lines only grow at their ends, those that can resume are
    /// always the first ones.
    struct Waiters {
        /// How far each line is: a number per style.
        struct Marks {
            var asap: UInt64
            var idle: UInt64

            /// Whether `self` (what is done) is at or past `target`.
            func reached(_ target: Marks) -> Bool { asap >= target.asap && idle >= target.idle }
        }

        private var order: [(id: UInt64, target: Marks)] = []
        private var orderHead = 0
        private var continuations: [UInt64: CheckedContinuation<Void, Never>] = [:]

        var isEmpty: Bool { continuations.isEmpty }

        /// The tasks waiting (tests).
        var count: Int { continuations.count }

        mutating func append(_ id: UInt64, target: Marks, _ continuation: CheckedContinuation<Void, Never>) {
            order.append((id, target))
            continuations[id] = continuation
        }

        /// Removes a waiter (cancelled); its continuation, unless resumed already.
        mutating func remove(_ id: UInt64) -> CheckedContinuation<Void, Never>? {
            let continuation = continuations.removeValue(forKey: id)
            if continuations.isEmpty { reset() }
            return continuation
        }

        /// Removes and returns the waiters whose notifications are all `done`.
        ///
        /// - Complexity: O(1) amortized (and O(1) without waiters).
        mutating func resumable(done: Marks) -> [CheckedContinuation<Void, Never>] {
            guard !continuations.isEmpty else { return [] }
            var resumes: [CheckedContinuation<Void, Never>] = []
            while orderHead < order.count, done.reached(order[orderHead].target) {
                if let continuation = continuations.removeValue(forKey: order[orderHead].id) {
                    resumes.append(continuation)
                }
                orderHead += 1
            }
            if continuations.isEmpty { reset() }
            return resumes
        }

        private mutating func reset() {
            order = []
            orderHead = 0
        }
    }
}
