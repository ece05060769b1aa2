import Synchronization
import Testing

@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#endif

extension NotificationName where Payload == Int {
    fileprivate static let level = NotificationName("queue.level")
    fileprivate static let other = NotificationName("queue.other")
}

extension NotificationName where Payload == Void {
    fileprivate static let tick = NotificationName("queue.tick")
}

/// Records "name:payload@sender" for each notification it receives.
// @unchecked Sendable: `storage` is only touched under its lock.
private final class Log: @unchecked Sendable {
    private let storage = _Mutex<[String]>([])
    var entries: [String] { storage.withLock { $0 } }
    func append(_ entry: String) { storage.withLock { $0.append(entry) } }
}

private final class Source: Sendable {
    let name: String
    let lifetime: LifetimeCounter?
    init(_ name: String, lifetime: LifetimeCounter? = nil) {
        self.name = name
        self.lifetime = lifetime
        lifetime?.didInit()
    }
    deinit { lifetime?.didDeinit() }
}

private final class Box: Sendable {
    let value: Int
    let lifetime: LifetimeCounter
    init(_ value: Int, lifetime: LifetimeCounter) {
        self.value = value
        self.lifetime = lifetime
        lifetime.didInit()
    }
    deinit { lifetime.didDeinit() }
}

extension NotificationName where Payload == Box {
    fileprivate static let boxed = NotificationName("queue.boxed")
}

/// Observes `.level`, `.other` and `.tick` on `hub` for `log`, on the
/// posting thread.
private func record(_ hub: NotificationHub, into log: Log) {
    func describe(_ sender: AnyObject?) -> String { (sender as? Source)?.name ?? "-" }
    hub.observe(.level, by: log, isolation: nil) { log, n in log.append("level:\(n.payload)@\(describe(n.sender))") }
    hub.observe(.other, by: log, isolation: nil) { log, n in log.append("other:\(n.payload)@\(describe(n.sender))") }
    hub.observe(.tick, by: log, isolation: nil) { log, n in log.append("tick@\(describe(n.sender))") }
}

/// Returns once the main actor ran the jobs enqueued on it before this call
/// (and those they enqueue at the back, `rounds` times over).
@MainActor
private func drainMainActor(rounds: Int = 2) async {
    for _ in 0..<rounds { await Task { @MainActor in }.value }
}

@Suite("Notification queue")
@MainActor
struct NotificationQueueTests {
    @Test func asapPostsAfterTheCurrentJob_onceWithTheLatestPayload() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        let source = Source("a")
        for level in 1...3 { queue.enqueue(.level, payload: level, from: source, postingStyle: .asap) }
        #expect(log.entries.isEmpty, "asap is never synchronous")
        #expect(queue.count == 1)
        await drainMainActor()
        #expect(log.entries == ["level:3@a"])
        #expect(queue.count == 0)
    }

    @Test func withoutCoalescing_everyNotificationIsPostedInOrder() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        for level in 1...3 { queue.enqueue(.level, payload: level, postingStyle: .asap, coalescing: []) }
        queue.enqueue(.tick, postingStyle: .asap, coalescing: [])
        await drainMainActor()
        #expect(log.entries == ["level:1@-", "level:2@-", "level:3@-", "tick@-"])
    }

    // Foundation's `NotificationQueue` removes every queued notification that
    // matches, then appends the new one (swift-corelibs-foundation's
    // `enqueue(_:postingStyle:coalesceMask:forModes:)` and GNUstep's): the
    // merged notification is posted where the last one was enqueued.

    @Test func coalescingOnName_mergesAcrossSenders_theMergedOneQueuedLast() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        let a = Source("a")
        let b = Source("b")
        queue.enqueue(.level, payload: 1, from: a, postingStyle: .asap, coalescing: .onName)
        queue.enqueue(.tick, postingStyle: .asap, coalescing: .onName)
        queue.enqueue(.level, payload: 2, from: b, postingStyle: .asap, coalescing: .onName)
        await drainMainActor()
        #expect(log.entries == ["tick@-", "level:2@b"])
    }

    @Test func coalescingOnSender_mergesAcrossNamesOfTheSamePayload() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        let a = Source("a")
        let b = Source("b")
        queue.enqueue(.level, payload: 1, from: a, postingStyle: .asap, coalescing: .onSender)
        queue.enqueue(.level, payload: 2, from: b, postingStyle: .asap, coalescing: .onSender)
        queue.enqueue(.other, payload: 3, from: a, postingStyle: .asap, coalescing: .onSender)
        await drainMainActor()
        #expect(log.entries == ["level:2@b", "other:3@a"])
    }

    @Test func coalescingOnNameAndSender_keepsDifferentSendersApart() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        let a = Source("a")
        let b = Source("b")
        queue.enqueue(.level, payload: 1, from: a, postingStyle: .asap)
        queue.enqueue(.level, payload: 2, from: b, postingStyle: .asap)
        queue.enqueue(.level, payload: 3, from: a, postingStyle: .asap)
        queue.enqueue(.level, payload: 4, postingStyle: .asap)
        await drainMainActor()
        #expect(log.entries == ["level:2@b", "level:3@a", "level:4@-"])
    }

    /// swift-corelibs-foundation's
    /// `test_postAsapToDefaultQueueWithCoalescingOnNameOrSender`: five `asap`
    /// notifications of one name from two senders, coalescing on name, on
    /// sender, on name, on name, on sender: only the 4th and the 5th are
    /// posted (the 3rd removes the 1st and the 2nd, the 4th the 3rd).
    @Test func coalescingRemovesEveryQueuedMatch_asFoundationsNotificationQueue() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        let a = Source("a")
        let b = Source("b")
        queue.enqueue(.level, payload: 1, from: a, postingStyle: .asap, coalescing: .onName)
        queue.enqueue(.level, payload: 2, from: b, postingStyle: .asap, coalescing: .onSender)
        queue.enqueue(.level, payload: 3, from: a, postingStyle: .asap, coalescing: .onName)
        queue.enqueue(.level, payload: 4, from: b, postingStyle: .asap, coalescing: .onName)
        queue.enqueue(.level, payload: 5, from: a, postingStyle: .asap, coalescing: .onSender)
        #expect(queue.count == 2)
        await drainMainActor()
        #expect(log.entries == ["level:4@b", "level:5@a"])
        #expect(queue.count == 0)
    }

    @Test func coalescingRemovesEveryMatch_queuedAsapOrWhenIdle() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        for level in 1...3 { queue.enqueue(.level, payload: level, postingStyle: .asap, coalescing: []) }
        for level in 4...6 { queue.enqueue(.level, payload: level, postingStyle: .whenIdle, coalescing: []) }
        queue.enqueue(.tick, postingStyle: .asap, coalescing: [])
        #expect(queue.count == 7)
        queue.enqueue(.level, payload: 7, postingStyle: .asap, coalescing: .onName)
        #expect(queue.count == 2)
        #expect(await eventually { log.entries.count == 2 })
        #expect(log.entries == ["tick@-", "level:7@-"])
    }

    /// Foundation files a notification in its own style's list after
    /// removing its matches from both: a `whenIdle` one that matches an
    /// `asap` one removes it and waits for idle.
    @Test func aWhenIdleNotificationMatchingAnAsapOne_removesIt_andWaitsForIdle() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        queue.enqueue(.level, payload: 1, postingStyle: .asap)
        queue.enqueue(.tick, postingStyle: .asap)
        queue.enqueue(.level, payload: 2, postingStyle: .whenIdle)
        #expect(queue.count == 2)
        #expect(await eventually { log.entries.count == 2 })
        #expect(log.entries == ["tick@-", "level:2@-"])
    }

    @Test func now_postsBeforeReturning_andRemovesTheQueuedOnesItMatches() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        queue.enqueue(.level, payload: 1, postingStyle: .asap)
        queue.enqueue(.level, payload: 2, postingStyle: .whenIdle, coalescing: [])
        queue.enqueue(.tick, postingStyle: .asap)
        queue.enqueue(.level, payload: 3, postingStyle: .now)
        #expect(log.entries == ["level:3@-"])
        #expect(queue.count == 1)
        await drainMainActor(rounds: 3)
        #expect(log.entries == ["level:3@-", "tick@-"])
    }

    @Test func whenIdle_postsAfterAsap_andAfterTheJobsAlreadyEnqueued() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        queue.enqueue(.level, payload: 1, postingStyle: .whenIdle)
        queue.enqueue(.tick, postingStyle: .asap)
        Task { @MainActor in log.append("job") }
        // A task with a priority may reach the main actor through the global
        // executor, so the idle job's arrival is not ordered with `job`'s;
        // its post is, by its yield.
        #expect(await eventually { log.entries.count == 3 })
        #expect(log.entries == ["tick@-", "job", "level:1@-"])
    }

    @Test func anAsapNotificationMatchingAnIdleOne_replacesItWithoutWaiting() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        queue.enqueue(.level, payload: 1, postingStyle: .whenIdle)
        queue.enqueue(.level, payload: 2, postingStyle: .asap)
        #expect(queue.count == 1)
        await drainMainActor(rounds: 3)
        #expect(log.entries == ["level:2@-"])
    }

    @Test func aNotificationFromASenderThatDied_isDropped_andTheSenderIsNotKeptAlive() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        let lifetime = LifetimeCounter()
        var sender: Source? = Source("gone", lifetime: lifetime)
        queue.enqueue(.level, payload: 1, from: sender, postingStyle: .asap)
        queue.enqueue(.level, payload: 2, postingStyle: .asap)
        sender = nil
        #expect(lifetime.deinitCount == 1, "a queued notification does not keep its sender alive")
        await drainMainActor()
        #expect(log.entries == ["level:2@-"])
    }

    @Test func dequeue_removesWithoutPosting_andReleasesThePayload() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let received = Log()
        hub.observe(.boxed, by: received, isolation: nil) { log, n in log.append("boxed:\(n.payload.value)") }
        let lifetime = LifetimeCounter()
        let source = Source("a")
        queue.enqueue(.boxed, payload: Box(1, lifetime: lifetime), from: source, postingStyle: .asap)
        queue.enqueue(.boxed, payload: Box(2, lifetime: lifetime), postingStyle: .whenIdle)
        #expect(lifetime.liveCount == 2)
        queue.dequeue(.boxed, from: source)
        #expect(lifetime.liveCount == 1)
        queue.dequeue(.boxed, coalescing: .onName)
        #expect(lifetime.liveCount == 0)
        await drainMainActor(rounds: 3)
        #expect(received.entries.isEmpty)
    }

    @Test func aCoalescedPayloadIsReleasedAtOnce() {
        let queue = NotificationHub.Queue(hub: NotificationHub())
        let lifetime = LifetimeCounter()
        for value in 0..<10 { queue.enqueue(.boxed, payload: Box(value, lifetime: lifetime), postingStyle: .asap) }
        #expect(lifetime.liveCount == 1)
        queue.dequeue(.boxed)
        #expect(lifetime.liveCount == 0)
    }

    @Test func aQueueThatDies_dropsWhatItHeld() async {
        let hub = NotificationHub()
        let log = Log()
        record(hub, into: log)
        let lifetime = LifetimeCounter()
        weak var weakQueue: NotificationHub.Queue?
        do {
            let queue = NotificationHub.Queue(hub: hub)
            weakQueue = queue
            queue.enqueue(.boxed, payload: Box(1, lifetime: lifetime), postingStyle: .asap)
            queue.enqueue(.level, payload: 1, postingStyle: .asap)
        }
        #expect(weakQueue == nil, "a scheduled job does not keep the queue alive")
        #expect(lifetime.liveCount == 0)
        await drainMainActor()
        #expect(log.entries.isEmpty)
    }

    /// The same on an actor with a custom executor, busy when the queue
    /// dies: the job waiting for the actor holds the queue only weakly. (A
    /// default actor takes the same path; keeping one busy for the test
    /// would hold one of the cooperative pool's two threads here, which a
    /// full run cannot spare.)
    @Test func aQueueThatDiesWhileItsActorIsBusy_dropsWhatItHeld() async {
        let hub = NotificationHub()
        let log = Log()
        record(hub, into: log)
        let lifetime = LifetimeCounter()
        let actor = ExecutorActor()
        actor.executor.hold()
        weak var weakQueue: NotificationHub.Queue?
        do {
            let queue = NotificationHub.Queue(hub: hub, actor: actor)
            weakQueue = queue
            queue.enqueue(.boxed, payload: Box(1, lifetime: lifetime), postingStyle: .asap)
            queue.enqueue(.level, payload: 1, postingStyle: .whenIdle)
            // Let the jobs reach the actor's queue.
            try? await Task.sleep(for: .milliseconds(20))
        }
        #expect(weakQueue == nil, "a job waiting for the busy actor keeps the queue alive")
        #expect(lifetime.liveCount == 0)
        actor.executor.release()
        await actor.sync()
        try? await Task.sleep(for: .milliseconds(20))
        #expect(log.entries.isEmpty, "a queue that died posted what it held")
    }

    @Test func aHandlerMayEnqueue_andItsNotificationFollows() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        hub.observe(.level, by: queue, isolation: nil) { queue, n in
            if n.payload < 3 { queue.enqueue(.level, payload: n.payload + 1, postingStyle: .asap) }
        }
        queue.enqueue(.level, payload: 1, postingStyle: .asap)
        #expect(await eventually { log.entries.count == 3 })
        #expect(log.entries == ["level:1@-", "level:2@-", "level:3@-"])
    }

    /// A handler that keeps enqueueing: each job posts what was queued when
    /// it started, so the actor's other jobs run in between. The handler
    /// stops by itself after five minutes, so that a job that holds the actor
    /// fails the test instead of hanging it. The other job is started by the
    /// handler itself, on the queue's actor (the main one), so the check
    /// counts posts in that actor's own order: no thread the test runs on,
    /// however loaded, can fail it.
    @Test(arguments: [NotificationHub.Queue.PostingStyle.asap, .whenIdle])
    func aHandlerThatKeepsEnqueueing_neverHoldsTheActor(style: NotificationHub.Queue.PostingStyle) async {
        let run = await keepEnqueueing(style: style, waiting: false)
        #expect(run.job < run.stoppedAt, "the queue's job held the main actor until its handler stopped")
    }

    /// The same, with a waiter on the queue's actor, started by the handler:
    /// it returns while the handler still enqueues, not once the queue is
    /// empty. (How soon is the runtime's: on Linux, a main-actor task
    /// resumed after a suspension comes back through the cooperative pool,
    /// so a loaded pool delays it by thousands of posts; in a parallel run
    /// of the whole suite on two cores, behind the other tests' jobs, by
    /// more than a minute; under the thread sanitizer, past five minutes,
    /// so the test runs in the other build modes only: it checks the
    /// runtime's scheduling, not a data race.)
    @Test(
        .disabled(if: isThreadSanitizerActive, "the waiter's resumption waits on the slowed pool"),
        arguments: [NotificationHub.Queue.PostingStyle.asap, .whenIdle])
    func aWaiterOnTheQueuesActor_returnsWhileAHandlerKeepsEnqueueing(style: NotificationHub.Queue.PostingStyle) async {
        let run = await keepEnqueueing(style: style, waiting: true)
        #expect(run.wait < run.stoppedAt, "the waiter on the queue's actor returned only once the handler stopped")
        #expect(run.wait > 1, "the waiter returned before what was queued when it called was posted")
    }

    /// A handler on a main-actor queue that enqueues the next notification
    /// at each post, for five minutes at most; at the first, it starts another
    /// main-actor job and (if `waiting`) a waiter there. Returns the posts
    /// made when each of them ran, and when the handler stopped by itself
    /// (`Int.max` if it stopped because both had run).
    private func keepEnqueueing(
        style: NotificationHub.Queue.PostingStyle, waiting: Bool
    ) async -> (job: Int, wait: Int, stoppedAt: Int) {
        // Long: the handler stops as soon as both ran; only a waiter that
        // never returns waits this long.
        let deadline = ContinuousClock.now + .seconds(300)
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)  // the main actor
        let posted = Atomic<Int>(0)
        let afterJob = Atomic<Int>(-1)
        let afterWait = Atomic<Int>(waiting ? -1 : 0)
        let stoppedAt = Atomic<Int>(.max)
        hub.observe(.level, by: queue, isolation: nil) { queue, n in
            posted.store(n.payload, ordering: .relaxed)
            if n.payload == 1 {
                Task { @MainActor in afterJob.store(posted.load(ordering: .relaxed), ordering: .relaxed) }
                if waiting {
                    Task { @MainActor in
                        await queue.waitUntilPosted()  // resumes on the queue's actor
                        afterWait.store(posted.load(ordering: .relaxed), ordering: .relaxed)
                    }
                }
            }
            guard afterJob.load(ordering: .relaxed) < 0 || afterWait.load(ordering: .relaxed) < 0 else { return }
            guard n.payload % 4_096 != 0 || ContinuousClock.now < deadline else {
                stoppedAt.store(n.payload, ordering: .relaxed)
                return
            }
            queue.enqueue(.level, payload: n.payload + 1, postingStyle: style)
        }
        queue.enqueue(.level, payload: 1, postingStyle: style)
        while afterWait.load(ordering: .relaxed) < 0 || afterJob.load(ordering: .relaxed) < 0 || queue.count > 0,
            ContinuousClock.now < deadline + .seconds(30)
        {
            try? await Task.sleep(for: .milliseconds(5))
        }
        #expect(afterWait.load(ordering: .relaxed) >= 0 && afterJob.load(ordering: .relaxed) >= 0)
        #expect(queue.count == 0)
        return (
            afterJob.load(ordering: .relaxed), afterWait.load(ordering: .relaxed),
            stoppedAt.load(ordering: .relaxed)
        )
    }

    @Test func aListenerThatDiesBeforeThePost_isNotCalled() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let calls = Atomic<Int>(0)
        var listener: Log? = Log()
        hub.observe(.level, by: listener!, isolation: nil) { _, _ in calls.add(1, ordering: .relaxed) }
        queue.enqueue(.level, payload: 1, postingStyle: .asap)
        listener = nil
        await drainMainActor()
        #expect(calls.load(ordering: .relaxed) == 0)
    }

    @Test func postsFromItsActor() async {
        actor Worker {}
        let worker = Worker()
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub, actor: worker)
        let onWorker = Atomic<Int>(0)
        let posts = Atomic<Int>(0)
        let log = Log()
        hub.observe(.level, by: log, isolation: nil) { _, _ in
            if _isCurrentExecutor(worker.unownedExecutor, isMainActor: false) { onWorker.add(1, ordering: .relaxed) }
            posts.add(1, ordering: .relaxed)
        }
        queue.enqueue(.level, payload: 1, postingStyle: .asap)
        queue.enqueue(.level, payload: 2, postingStyle: .whenIdle, coalescing: [])
        #expect(await eventually { posts.load(ordering: .relaxed) == 2 })
        #expect(onWorker.load(ordering: .relaxed) == 2)
    }

    @Test func enqueueingFromManyThreads_postsEachUncoalescedNotificationOnce() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let received = _Mutex<[Int]>([])
        let log = Log()
        hub.observe(.level, by: log, isolation: nil) { _, n in received.withLock { $0.append(n.payload) } }
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<4 {
                group.addTask {
                    for i in 0..<250 {
                        queue.enqueue(.level, payload: thread * 1_000 + i, postingStyle: .asap, coalescing: [])
                    }
                }
            }
        }
        #expect(await eventually { received.withLock { $0.count } == 1_000 })
        let values = received.withLock { $0 }
        #expect(Set(values).count == 1_000)
        for thread in 0..<4 {
            let mine = values.filter { $0 / 1_000 == thread }
            #expect(mine == mine.sorted(), "each thread's notifications are posted in the order it enqueued them")
        }
    }

    // MARK: Waiting until what was enqueued is posted

    @Test func waitUntilPosted_fromTheQueuesOwnActor_returnsOnceEverythingEnqueuedBeforeWasPosted() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        queue.enqueue(.level, payload: 1, postingStyle: .asap)
        queue.enqueue(.level, payload: 2, postingStyle: .whenIdle, coalescing: [])
        queue.enqueue(.tick, postingStyle: .asap)
        let returned = Flag()
        Task { @MainActor in
            await queue.waitUntilPosted()
            log.append("returned")
            returned.set()
        }
        #expect(await eventually { returned.isSet }, "waitUntilPosted() on the queue's own actor did not return")
        #expect(log.entries == ["level:1@-", "tick@-", "level:2@-", "returned"])
        #expect(queue.count == 0)
    }

    @Test func waitUntilPosted_withNothingQueued_returnsAtOnce() async {
        let queue = NotificationHub.Queue(hub: NotificationHub())
        await queue.waitUntilPosted()
        queue.enqueue(.level, payload: 1, postingStyle: .now)
        await queue.waitUntilPosted()
        #expect(queue.count == 0)
    }

    @Test func waitUntilPosted_countsWhatWasDroppedAsDone() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        record(hub, into: log)
        var sender: Source? = Source("gone")
        queue.enqueue(.level, payload: 1, from: sender, postingStyle: .whenIdle)
        queue.enqueue(.other, payload: 2, postingStyle: .whenIdle)
        queue.enqueue(.tick, postingStyle: .whenIdle)
        sender = nil
        queue.dequeue(.other)
        queue.enqueue(.tick, postingStyle: .asap)  // coalesces the idle one
        let returned = Flag()
        Task { @MainActor in
            await queue.waitUntilPosted()
            returned.set()
        }
        #expect(await eventually { returned.isSet })
        #expect(log.entries == ["tick@-"])
    }

    /// A handler that enqueues again on every post keeps the queue's job
    /// busy for ever: a waiter waits for what was enqueued before its call
    /// only.
    @Test func waitUntilPosted_doesNotWaitForWhatIsEnqueuedAfterTheCall() async {
        let hub = NotificationHub()
        // Its own thread: the endless job takes none from the cooperative pool.
        let queue = NotificationHub.Queue(hub: hub, actor: ExecutorActor())
        let stop = Flag()
        let posts = Atomic<Int>(0)
        hub.observe(.level, by: queue, isolation: nil) { queue, n in
            posts.add(1, ordering: .relaxed)
            if !stop.isSet { queue.enqueue(.level, payload: n.payload + 1, postingStyle: .asap) }
        }
        defer { stop.set() }
        queue.enqueue(.level, payload: 1, postingStyle: .asap)
        let returned = Flag()
        Task.detached {
            await queue.waitUntilPosted()
            returned.set()
        }
        #expect(await eventually { returned.isSet }, "the waiter waited for notifications enqueued after its call")
        stop.set()
        #expect(await eventually { queue.count == 0 })
        #expect(posts.load(ordering: .relaxed) >= 1)
    }

    /// Posted means observed: a waiter on another thread returns only after
    /// the handlers of the notifications it waits for returned.
    @Test func waitUntilPosted_returnsAfterTheHandlersOfThePostReturned() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)
        let log = Log()
        hub.observe(.level, by: log, isolation: nil) { log, _ in
            let waiting = Flag()
            Task.detached {
                waiting.set()
                await queue.waitUntilPosted()
                log.append("returned")
            }
            _ = settles { waiting.isSet }
            usleep(50_000)  // the waiter runs meanwhile, on another thread
            log.append("handler")
        }
        queue.enqueue(.level, payload: 1, postingStyle: .asap)
        #expect(await eventually { log.entries.count == 2 })
        #expect(log.entries == ["handler", "returned"])
    }

    /// An observer isolated to another actor is handed the notification:
    /// the waiter returns once it was, not once that actor ran it (as
    /// documented; attack U1).
    @Test func waitUntilPosted_handsObserversOnOtherActorsTheNotification_withoutWaitingForThem() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub)  // the main actor
        let elsewhere = ExecutorActor()
        let log = Log()
        let received = Atomic<Int>(0)
        await elsewhere.observeLevel(on: hub, by: log) { received.add(1, ordering: .relaxed) }
        elsewhere.executor.hold()
        queue.enqueue(.level, payload: 1, postingStyle: .asap)
        await queue.waitUntilPosted()
        #expect(received.load(ordering: .relaxed) == 0, "the waiter waited for the other actor to run its observer")
        elsewhere.executor.release()
        #expect(await eventually { received.load(ordering: .relaxed) == 1 })
    }

    @Test func waitUntilPosted_returnsWhenItsTaskIsCancelled_withTheNotificationsStillQueued() async {
        let busy = ExecutorActor()
        let queue = NotificationHub.Queue(hub: NotificationHub(), actor: busy)
        busy.executor.hold()
        defer { busy.executor.release() }
        queue.enqueue(.level, payload: 1, postingStyle: .asap)  // its job is held
        let returned = Flag()
        let waiter = Task.detached {
            await queue.waitUntilPosted()
            returned.set()
        }
        try? await Task.sleep(for: .milliseconds(20))
        #expect(!returned.isSet)
        waiter.cancel()
        #expect(await eventually { returned.isSet }, "a cancelled waiter kept waiting")
        #expect(queue.count == 1)
        // A task cancelled before it waits does not wait either.
        let returnedAtOnce = Flag()
        Task.detached {
            withUnsafeCurrentTask { $0?.cancel() }
            await queue.waitUntilPosted()
            returnedAtOnce.set()
        }
        #expect(await eventually { returnedAtOnce.isSet }, "a cancelled task waited")
        busy.executor.release()
        #expect(await eventually { queue.count == 0 })
        // And a waiter that is not cancelled returns once the job ran.
        await queue.waitUntilPosted()
    }
}

extension ExecutorActor {
    /// Observes `.level` on `hub` by `listener`, the handler isolated to this actor.
    fileprivate func observeLevel(on hub: NotificationHub, by listener: Log, _ body: @escaping @Sendable () -> Void) {
        hub.observe(.level, by: listener) { _, _ in body() }
    }
}
