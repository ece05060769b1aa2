import Synchronization

extension NotificationHub {
    /// Holds notifications back and posts them later, on an actor, merging
    /// similar ones: Foundation's `NotificationQueue`, defined for Swift
    /// concurrency.
    ///
    /// ```swift
    /// let queue = NotificationHub.Queue.main
    /// for message in batch {
    ///     inbox.add(message)
    ///     // Posted once, after this job, with the last count.
    ///     queue.enqueue(.unreadCountChanged, payload: inbox.unread, from: inbox, postingStyle: .asap)
    /// }
    /// ```
    ///
    /// A queue posts to its hub from its actor, in the order notifications
    /// were enqueued (``PostingStyle/asap`` ones before ``PostingStyle/whenIdle``
    /// ones). Observers registered from another actor then receive them on
    /// their own, as for any post.
    ///
    /// A queued notification holds its sender by identity, without keeping
    /// it alive: if the sender dies before the notification is posted, it is
    /// dropped. The queue holds its hub and its actor.
    public final class Queue: Sendable {
        /// When an enqueued notification is posted.
        ///
        /// ```swift
        /// queue.enqueue(.didSync, postingStyle: .whenIdle)
        /// ```
        public enum PostingStyle: Sendable, Hashable {
            /// Before `enqueue` returns, on the calling thread (after
            /// removing the queued notifications it coalesces with).
            ///
            /// ```swift
            /// queue.enqueue(.didSync, postingStyle: .now)   // posted here
            /// ```
            case now
            /// By one job on the queue's actor, scheduled when the first such
            /// notification is enqueued: after the actor's current job, and
            /// after the jobs enqueued on it before. The job posts every
            /// `asap` notification enqueued until it runs, in order; those
            /// its handlers enqueue go to the next job, behind the actor's
            /// other work.
            ///
            /// ```swift
            /// queue.enqueue(.didSync, postingStyle: .asap)   // posted after this job
            /// ```
            case asap
            /// When the actor has caught up: by a background-priority job on
            /// the actor that first posts what is queued `asap`, then yields
            /// once (so that the jobs enqueued on the actor before it run
            /// first), then posts every `whenIdle` notification, in order.
            /// Swift concurrency has no idle signal, so this is the
            /// definition: later than `asap`, never before the actor's
            /// pending work.
            ///
            /// ```swift
            /// queue.enqueue(.cacheTrimmed, postingStyle: .whenIdle)
            /// ```
            case whenIdle
        }

        /// Which queued notifications an enqueued one merges with.
        ///
        /// ```swift
        /// queue.enqueue(.unreadCountChanged, payload: 3, postingStyle: .asap, coalescing: .onName)
        /// ```
        ///
        /// As Foundation's `NotificationQueue` does, enqueueing a
        /// notification first removes every queued one it matches, whatever
        /// their posting style, then queues it last among its style's (a
        /// `now` one is posted at once instead): observers see one
        /// notification, the latest, where the last one was enqueued.
        public struct Coalescing: OptionSet, Sendable, Hashable {
            /// The option bits.
            ///
            /// ```swift
            /// let both = NotificationHub.Queue.Coalescing(rawValue: 3)   // [.onName, .onSender]
            /// ```
            public let rawValue: UInt8

            /// Creates a set of options from their bits.
            ///
            /// ```swift
            /// let onName = NotificationHub.Queue.Coalescing(rawValue: 1)
            /// ```
            public init(rawValue: UInt8) { self.rawValue = rawValue }

            /// Notifications of the same name match.
            ///
            /// ```swift
            /// queue.enqueue(.didSync, postingStyle: .asap, coalescing: .onName)
            /// ```
            public static let onName = Coalescing(rawValue: 1 << 0)
            /// Notifications from the same sender (or both from none) match.
            ///
            /// ```swift
            /// queue.enqueue(.didSync, from: store, postingStyle: .asap, coalescing: [.onName, .onSender])
            /// ```
            public static let onSender = Coalescing(rawValue: 1 << 1)
        }

        /// A queue posting to the default hub from the main actor.
        ///
        /// ```swift
        /// NotificationHub.Queue.main.enqueue(.didSync, postingStyle: .asap)
        /// ```
        public static let main = Queue()

        /// The hub the queue posts to.
        ///
        /// ```swift
        /// assert(queue.hub === NotificationHub.default)
        /// ```
        public let hub: NotificationHub
        /// The actor the queue posts from.
        let actor: any Actor
        let isMainActor: Bool
        let state = _Mutex(State())
        /// Identifies the tasks in ``waitUntilPosted()``.
        private let nextWaiterID = Atomic<UInt64>(0)

        /// Creates a queue that posts to `hub` from `actor`.
        ///
        /// ```swift
        /// let queue = NotificationHub.Queue(hub: hub, actor: syncActor)
        /// ```
        ///
        /// - Parameters:
        ///   - hub: Where notifications are posted; the default hub by default.
        ///   - actor: Where `asap` and `whenIdle` notifications are posted
        ///     from; the main actor by default.
        public init(hub: NotificationHub = .default, actor: any Actor = MainActor.shared) {
            self.hub = hub
            self.actor = actor
            isMainActor = actor === MainActor.shared
        }

        /// The number of notifications waiting to be posted.
        ///
        /// ```swift
        /// queue.enqueue(.didSync, postingStyle: .asap)
        /// assert(queue.count == 1)
        /// ```
        public var count: Int { state.withLock { $0.count } }

        /// How many tasks wait in ``waitUntilPosted()`` (tests).
        var _waiterCount: Int { state.withLock { $0.waiters.count } }

        /// Enqueues a notification, to be posted as `postingStyle` says,
        /// merged with the queued notifications `coalescing` matches.
        ///
        /// ```swift
        /// queue.enqueue(.unreadCountChanged, payload: 3, from: inbox, postingStyle: .asap)
        /// ```
        ///
        /// - Parameters:
        ///   - name: The notification's name.
        ///   - payload: What it carries.
        ///   - sender: The object posting it, if any; never retained.
        ///   - postingStyle: When it is posted.
        ///   - coalescing: Which queued notifications it merges with; by
        ///     name and sender by default, as Foundation's `NotificationQueue`.
        /// - Complexity: Amortized O(1) plus the queued notifications it
        ///   removes, whatever else is queued (for `now`, plus the post).
        public func enqueue<Payload>(
            _ name: NotificationName<Payload>, payload: Payload, from sender: AnyObject? = nil,
            postingStyle: PostingStyle, coalescing: Coalescing = [.onName, .onSender]
        ) {
            let hub = hub
            let entry = Entry(nameID: name.id, sender: sender.map(_UnretainedReference.init)) { sender in
                hub.post(name, payload: payload, from: sender)
            }
            let action = state.withLock {
                $0.enqueue(entry, from: sender, style: postingStyle, coalescing: coalescing)
            }
            _ = action.released  // released unlocked: a payload's deinit may be user code
            for waiter in action.resumes { waiter.resume() }
            if action.postsNow { hub.post(name, payload: payload, from: sender) }
            if let style = action.schedules { schedule(style) }
        }

        /// Enqueues a notification whose payload is `()`.
        ///
        /// ```swift
        /// queue.enqueue(.didSync, from: store, postingStyle: .whenIdle)
        /// ```
        public func enqueue(
            _ name: NotificationName<Void>, from sender: AnyObject? = nil,
            postingStyle: PostingStyle, coalescing: Coalescing = [.onName, .onSender]
        ) {
            enqueue(name, payload: (), from: sender, postingStyle: postingStyle, coalescing: coalescing)
        }

        /// Removes the queued notifications that match `name` and `sender`
        /// as `coalescing` says, without posting them.
        ///
        /// ```swift
        /// queue.dequeue(.didSync, from: store)
        /// ```
        ///
        /// - Parameters:
        ///   - name: The name to match.
        ///   - sender: The sender to match (`nil`: notifications with none).
        ///   - coalescing: What must match; name and sender by default.
        /// - Complexity: Amortized O(1) plus the queued notifications it
        ///   removes, whatever else is queued.
        public func dequeue<Payload>(
            _ name: NotificationName<Payload>, from sender: AnyObject? = nil,
            coalescing: Coalescing = [.onName, .onSender]
        ) {
            let action = state.withLock { $0.dequeue(matching: name.id, sender: sender, coalescing: coalescing) }
            _ = action.released  // released unlocked
            for waiter in action.resumes { waiter.resume() }
        }

        /// Returns once every notification enqueued before the call was
        /// posted (its observers on the queue's actor or unisolated called;
        /// those on other actors handed the notification, which they may
        /// not have run yet) or
        /// dropped: removed by coalescing or ``dequeue(_:from:coalescing:)``,
        /// or its sender died.
        ///
        /// ```swift
        /// queue.enqueue(.didSync, postingStyle: .whenIdle)
        /// await queue.waitUntilPosted()   // .didSync was posted
        /// ```
        ///
        /// Notifications enqueued after the call (by a handler, say) are not
        /// waited for, so a queue that is never empty still lets its waiters
        /// go. It may be called from anywhere, the queue's own actor
        /// included (it suspends; the queue's jobs run meanwhile): for
        /// tests, and before shutting down.
        ///
        /// If the calling task is cancelled, it returns at once, whatever is
        /// still queued (check `Task.isCancelled` to tell).
        ///
        /// - Parameter isolation: The actor the caller resumes on; the
        ///   caller's by default. How soon the caller runs again once its
        ///   notifications are posted is the runtime's: on Linux, a task
        ///   resumed on the main actor comes back through the cooperative
        ///   thread pool, so a busy pool delays it while the actor's other
        ///   jobs run.
        /// - Complexity: O(1) amortized, plus the wait.
        public func waitUntilPosted(isolation: isolated (any Actor)? = #isolation) async {
            let id = nextWaiterID.wrappingAdd(1, ordering: .relaxed).oldValue
            await withTaskCancellationHandler {
                await withCheckedContinuation(isolation: isolation) {
                    (continuation: CheckedContinuation<Void, Never>) in
                    // Cancellation is read under the lock: a cancellation
                    // handler that ran before found no waiter, and then
                    // this reads the task cancelled.
                    let resumeNow = state.withLock { $0.wait(id, isCancelled: Task.isCancelled, continuation) }
                    resumeNow?.resume()
                }
            } onCancel: {
                state.withLock { $0.cancelWaiter(id) }?.resume()
            }
        }

        // MARK: Jobs

        /// Schedules the job that posts what is queued with `style`. The job
        /// holds the queue weakly: a queue that dies drops what it held.
        private func schedule(_ style: PostingStyle) {
            let priority: TaskPriority? = style == .whenIdle ? .background : nil
            if isMainActor {
                Task(priority: priority) { @MainActor [weak self] in
                    await self?.run(style)
                }
            } else {
                // Loaded on the actor: a strong reference taken before the
                // hop would hold the queue while the job waits for it.
                let actor = actor
                let queue = WeakQueue(queue: self)
                Task(priority: priority) {
                    await Self.run(queue, style, on: actor)
                }
            }
        }

        private struct WeakQueue: Sendable {
            weak var queue: Queue?
        }

        private static func run(_ queue: WeakQueue, _ style: PostingStyle, on actor: isolated any Actor) async {
            await queue.queue?.run(style)
        }

        /// Posts what is queued with `style` (for `whenIdle`: `asap` first,
        /// then one yield). Runs on the queue's actor.
        private func run(_ style: PostingStyle, isolation: isolated (any Actor)? = #isolation) async {
            if style == .whenIdle {
                post(.asap)
                await Task.yield()
            }
            post(style)
        }

        /// Posts the notifications queued with `style` when the job started
        /// (at most ``State/postsPerJob``), one at a time, in order, then
        /// ends the job. What a handler or another thread enqueues meanwhile
        /// goes to another job, behind the actor's other work: whoever keeps
        /// enqueueing, the actor's other work waits for one job at most.
        private func post(_ style: PostingStyle) {
            let bound = state.withLock { $0.bound(style) }
            while true {
                // Asking for the next one tells the state the last one was posted.
                let action = state.withLock { $0.next(style, before: bound) }
                for waiter in action.resumes { waiter.resume() }
                guard let entry = action.entry else {
                    if action.reschedules { schedule(style) }
                    return
                }
                guard let sender = entry.sender else {
                    entry.post(nil)
                    continue
                }
                // A notification from a sender that died is dropped.
                if let sender = sender.load() { entry.post(sender) }
            }
        }
    }
}
