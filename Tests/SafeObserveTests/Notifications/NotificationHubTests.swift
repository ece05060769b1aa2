import Synchronization
import Testing

@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#endif

extension NotificationName where Payload == Int {
    fileprivate static let count = NotificationName("count")
    fileprivate static let other = NotificationName("other")
}

extension NotificationName where Payload == Void {
    fileprivate static let ping = NotificationName("ping")
}

/// A listener that records what it receives.
private final class Inbox: @unchecked Sendable {
    // @unchecked Sendable: `received` is only touched under its lock.
    let received = _Mutex<[String]>([])
    let lifetime: LifetimeCounter?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }

    deinit { lifetime?.didDeinit() }

    func record(_ entry: String) { received.withLock { $0.append(entry) } }
    var entries: [String] { received.withLock { $0 } }
}

/// A listener whose description is the same for every instance (the
/// original identified observers by their description).
private final class LookAlike: CustomStringConvertible, @unchecked Sendable {
    let received = Atomic<Int>(0)
    var description: String { "LookAlike" }
}

private final class Sender: Sendable {
    let lifetime: LifetimeCounter?
    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }
    deinit { lifetime?.didDeinit() }
}

private final class Payload: Sendable {
    let lifetime: LifetimeCounter
    init(lifetime: LifetimeCounter) {
        self.lifetime = lifetime
        lifetime.didInit()
    }
    deinit { lifetime.didDeinit() }
}

@Suite("NotificationHub")
struct NotificationHubTests {
    @Test func aPostReachesItsObservers_withTheListenerAndTheTypedPayload() {
        let hub = NotificationHub()
        let inbox = Inbox()
        hub.observe(.count, by: inbox) { inbox, notification in inbox.record("count \(notification.payload)") }
        hub.observe(.other, by: inbox) { inbox, notification in inbox.record("other \(notification.payload)") }
        hub.post(.count, payload: 1)
        hub.post(.other, payload: 2)
        hub.post(.count, payload: 3)
        #expect(inbox.entries == ["count 1", "other 2", "count 3"])
    }

    @Test func namesWithTheSameStringButOtherPayloadTypes_areOtherNames() {
        let hub = NotificationHub()
        let inbox = Inbox()
        let asString = NotificationName<String>("count")
        hub.observe(asString, by: inbox) { inbox, notification in inbox.record(notification.payload) }
        hub.post(.count, payload: 1)
        hub.post(asString, payload: "one")
        #expect(inbox.entries == ["one"])
        #expect(NotificationName<Int>("count") == .count)
    }

    // YBNotificationCenter: its weak sender filter matched everything once
    // the sender died.
    @Test func aSenderFilter_matchesNothingOnceTheSenderDied() {
        let hub = NotificationHub()
        let inbox = Inbox()
        let lifetime = LifetimeCounter()
        var sender: Sender? = Sender(lifetime: lifetime)
        let senderID = ObjectIdentifier(sender!)
        hub.observe(.count, from: sender!, by: inbox) { inbox, notification in
            inbox.record("\(notification.payload)")
        }
        hub.post(.count, payload: 1, from: sender!)
        hub.post(.count, payload: 2, from: Sender())
        sender = nil
        #expect(lifetime.liveCount == 0, "the filter kept its sender alive")
        hub.post(.count, payload: 3)
        hub.post(.count, payload: 4, from: Sender())
        // Objects allocated after its death: none is taken for it, even at its address.
        var reused = 0
        for value in 5..<2_005 {
            let other = Sender()
            if ObjectIdentifier(other) == senderID { reused += 1 }
            hub.post(.count, payload: value, from: other)
        }
        #expect(inbox.entries == ["1"], "delivered through a dead sender's filter (\(reused) address reuses)")
    }

    // YBNotificationCenter: observers registered without a name never
    // received anything.
    /// Delivery goes group by group, each in registration order, whatever
    /// order the groups were registered in: the name's observers, the name
    /// from the sender, every name, every name from the sender.
    @Test func aPostFromASender_reachesTheFourGroupsInTheirDocumentedOrder() {
        let hub = NotificationHub()
        let sender = Sender()
        let log = Inbox()
        let listeners = (0..<8).map { _ in Inbox() }
        hub.observeEvery(from: sender, by: listeners[0], isolation: nil) { _, _ in log.record("every from sender 1") }
        hub.observeEvery(by: listeners[1], isolation: nil) { _, _ in log.record("every 1") }
        hub.observe(.count, from: sender, by: listeners[2], isolation: nil) { _, _ in log.record("name from sender 1") }
        hub.observe(.count, by: listeners[3], isolation: nil) { _, _ in log.record("name 1") }
        hub.observe(.count, by: listeners[4], isolation: nil) { _, _ in log.record("name 2") }
        hub.observe(.count, from: sender, by: listeners[5], isolation: nil) { _, _ in log.record("name from sender 2") }
        hub.observeEvery(by: listeners[6], isolation: nil) { _, _ in log.record("every 2") }
        hub.observeEvery(from: sender, by: listeners[7], isolation: nil) { _, _ in log.record("every from sender 2") }
        hub.post(.count, payload: 1, from: sender)
        #expect(
            log.entries == [
                "name 1", "name 2", "name from sender 1", "name from sender 2", "every 1", "every 2",
                "every from sender 1", "every from sender 2",
            ])
        withExtendedLifetime(listeners) {}
    }

    @Test func observersOfEveryName_receiveEveryNotification() {
        let hub = NotificationHub()
        let inbox = Inbox()
        let sender = Sender()
        hub.observeEvery(by: inbox) { inbox, notification in inbox.record("\(notification.name)") }
        hub.observeEvery(from: sender, by: Inbox()) { _, _ in }
        let filtered = Inbox()
        hub.observeEvery(from: sender, by: filtered) { inbox, notification in
            inbox.record("\(notification.name) \(notification.payload)")
        }
        hub.post(.count, payload: 1)
        hub.post(.ping)
        hub.post(.other, payload: 7, from: sender)
        #expect(inbox.entries == ["count", "ping", "other"])
        #expect(filtered.entries == ["other 7"])
    }

    // YBNotificationCenter: block observers' tokens were retained by the
    // center forever.
    @Test func aSubscription_endsWhenCancelledOrDeinitialized_releasingItsHandler() {
        let hub = NotificationHub()
        let lifetime = LifetimeCounter()
        let calls = Atomic<Int>(0)
        var subscription: NotificationSubscription? = {
            let payload = Payload(lifetime: lifetime)
            return hub.subscribe(.count) { _ in
                _ = payload
                calls.add(1, ordering: .relaxed)
            }
        }()
        hub.post(.count, payload: 1)
        #expect(calls.load(ordering: .relaxed) == 1)
        subscription = nil
        #expect(lifetime.liveCount == 0, "the handler outlived its subscription")
        hub.post(.count, payload: 2)
        #expect(calls.load(ordering: .relaxed) == 1)

        let kept = hub.subscribe(.count) { _ in calls.add(1, ordering: .relaxed) }
        #expect(kept.isActive)
        kept.cancel()
        kept.cancel()
        #expect(!kept.isActive)
        hub.post(.count, payload: 3)
        #expect(calls.load(ordering: .relaxed) == 1)
        _ = subscription
    }

    // YBNotificationCenter: observers were identified by their description.
    @Test func observersWithEqualDescriptions_areDistinct() {
        let hub = NotificationHub()
        let first = LookAlike()
        let second = LookAlike()
        hub.observe(.count, by: first) { listener, _ in listener.received.add(1, ordering: .relaxed) }
        hub.observe(.count, by: second) { listener, _ in listener.received.add(1, ordering: .relaxed) }
        hub.post(.count, payload: 1)
        hub.unobserve(.count, by: first)
        hub.post(.count, payload: 2)
        #expect(first.received.load(ordering: .relaxed) == 1)
        #expect(second.received.load(ordering: .relaxed) == 2)
    }

    @Test func aDeadListener_isNeverCalled_andItsRelationAndHandlerGo() {
        let hub = NotificationHub()
        let lifetime = LifetimeCounter()
        let calls = Atomic<Int>(0)
        var inbox: Inbox? = Inbox()
        do {
            let payload = Payload(lifetime: lifetime)
            hub.observe(.count, by: inbox!) { _, _ in
                _ = payload
                calls.add(1, ordering: .relaxed)
            }
        }
        inbox = nil
        hub.post(.count, payload: 1)
        #expect(calls.load(ordering: .relaxed) == 0)
        // A parallel test's sweep of dead plain listeners may end the relation
        // first and release the handler on its thread just after unlocking.
        #expect(settles { lifetime.liveCount == 0 }, "the dead listener's handler is still alive")
    }

    @Test func removalIsIdempotent_byToken_byName_bySender_andByListener() {
        let hub = NotificationHub()
        let inbox = Inbox()
        let sender = Sender()
        let token = hub.observe(.count, by: inbox) { inbox, _ in inbox.record("name") }
        hub.observe(.count, from: sender, by: inbox) { inbox, _ in inbox.record("sender") }
        hub.observe(.other, by: inbox) { inbox, _ in inbox.record("other") }
        #expect(SafeObservation.relations(observedBy: inbox).count == 3)
        token.invalidate()
        token.invalidate()
        hub.post(.count, payload: 1, from: sender)
        #expect(inbox.entries == ["sender"])
        hub.unobserve(.count, from: sender, by: inbox)
        hub.unobserve(.count, from: sender, by: inbox)
        hub.post(.count, payload: 1, from: sender)
        hub.post(.other, payload: 1)
        #expect(inbox.entries == ["sender", "other"])
        // Without a sender, a name's observations end whatever their filter.
        hub.observe(.count, by: inbox) { inbox, _ in inbox.record("name") }
        hub.observe(.count, from: sender, by: inbox) { inbox, _ in inbox.record("sender") }
        hub.unobserve(.count, by: inbox)
        hub.unobserve(.count, by: inbox)
        hub.post(.count, payload: 1, from: sender)
        #expect(inbox.entries == ["sender", "other"])
        hub.unobserve(by: inbox)
        hub.unobserve(by: inbox)
        hub.post(.other, payload: 1)
        #expect(inbox.entries == ["sender", "other"])
        #expect(SafeObservation.relations(observedBy: inbox).isEmpty)
    }

    @Test func observingTwice_isOneRelation_keepingTheFirstHandler() {
        let hub = NotificationHub()
        let inbox = Inbox()
        let first = hub.observe(.count, by: inbox) { inbox, _ in inbox.record("first") }
        let second = hub.observe(.count, by: inbox) { inbox, _ in inbox.record("second") }
        #expect(first == second)
        hub.post(.count, payload: 1)
        #expect(inbox.entries == ["first"])
    }

    @Test func aHandlerMayRemoveAnotherObserver_whoIsThenNotCalledForThisPost() {
        let hub = NotificationHub()
        let first = Inbox()
        let second = Inbox()
        hub.observe(.count, by: first) { first, _ in
            first.record("first")
            hub.unobserve(.count, by: second)
        }
        hub.observe(.count, by: second) { second, _ in second.record("second") }
        hub.post(.count, payload: 1)
        #expect(first.entries == ["first"])
        #expect(second.entries.isEmpty)
    }

    @Test func aPostFromInsideAHandler_isDeliveredAtOnce_beforeLaterObservers() {
        let hub = NotificationHub()
        let log = Inbox()
        hub.observe(.count, by: log) { log, notification in
            log.record("A\(notification.payload)")
            if notification.payload == 1 { hub.post(.count, payload: 2) }
        }
        hub.observe(.count, by: Inbox()) { _, _ in }
        let later = Inbox()
        hub.observe(.count, by: later) { _, notification in log.record("B\(notification.payload)") }
        hub.post(.count, payload: 1)
        #expect(log.entries == ["A1", "A2", "B2", "B1"])
        _ = later
    }

    @Test func tenThousandShortLivedListenersAndSenders_leaveBoundedState() {
        let hub = NotificationHub()
        for _ in 0..<10_000 {
            let inbox = Inbox()
            let sender = Sender()
            hub.observe(.count, by: inbox) { _, _ in }
            hub.observe(.count, from: sender, by: inbox) { _, _ in }
        }
        #expect(hub._senderChannelCount <= 8, "dead senders' channels accumulate: \(hub._senderChannelCount)")
        let survivor = Inbox()
        hub.observe(.count, by: survivor) { survivor, _ in survivor.record("x") }
        hub.post(.count, payload: 1)  // ends every dead listener's relation it meets
        let channel = hub.state.withLock { $0.channel(NotificationName<Int>.count.id, sender: nil) }
        let listed = channel?.state.withLock { $0.relations.count } ?? -1
        #expect(listed <= 16, "the name's relation list kept \(listed) slots")
        #expect(survivor.entries == ["x"])
    }

    @Test func aHubThatDies_endsItsRelations_andReleasesTheirHandlers() {
        let lifetime = LifetimeCounter()
        var hub: NotificationHub? = NotificationHub()
        let inbox = Inbox()
        do {
            let payload = Payload(lifetime: lifetime)
            hub!.observe(.count, by: inbox) { _, _ in _ = payload }
        }
        #expect(SafeObservation.relations(observedBy: inbox).count == 1)
        hub = nil
        #expect(lifetime.liveCount == 0)
        #expect(SafeObservation.relations(observedBy: inbox).isEmpty)
    }

    @Test func tokensDescribeNotificationRelations() {
        let hub = NotificationHub()
        let inbox = Inbox()
        let token = hub.observe(.count, by: inbox) { _, _ in }
        #expect(token.debugDescription.contains("a notification"))
        #expect(token.debugDescription.contains("Inbox"))
    }

    /// A post borrows the hub's channels and the sender's identity: a
    /// handler that drops the caller's last references to the hub and to the
    /// sender mid-post must not free them under it (run under ASan in CI).
    @Test func aHandlerReleasingTheHubAndTheSenderMidPost_isSafe() {
        // @unchecked Sendable: used on this thread only.
        final class Holder: @unchecked Sendable {
            var hub: NotificationHub? = NotificationHub()
            var sender: Sender? = Sender()
        }
        let holder = Holder()
        let first = Inbox()
        let second = Inbox()
        let filtered = Inbox()
        weak let weakHub = holder.hub
        holder.hub!.observe(.count, by: first) { inbox, notification in
            inbox.record("first \(notification.payload)")
            holder.hub = nil
            holder.sender = nil
        }
        holder.hub!.observe(.count, by: second) { inbox, notification in
            inbox.record("second \(notification.sender == nil ? "no sender" : "sender")")
        }
        holder.hub!.observe(.count, from: holder.sender!, by: filtered) { inbox, _ in inbox.record("filtered") }
        holder.hub!.post(.count, payload: 1, from: holder.sender!)
        #expect(first.entries == ["first 1"])
        #expect(second.entries == ["second sender"], "the post went on, with its sender alive")
        #expect(filtered.entries == ["filtered"])
        #expect(weakHub == nil, "the hub died once the post returned")
    }

    @Test func postingRacesObservingRemovingAndDeaths_safely() {
        // The original enumerated its observers without a lock while removal
        // mutated them. Under the thread sanitizer in CI.
        let hub = NotificationHub()
        let delivered = Atomic<Int>(0)
        let keeper = Inbox()
        hub.observe(.count, by: keeper) { _, _ in delivered.add(1, ordering: .relaxed) }
        stressRunConcurrently([
            { for value in 0..<2_000 { hub.post(.count, payload: value) } },
            { for value in 0..<2_000 { hub.post(.count, payload: value, from: keeper) } },
            {
                for _ in 0..<500 {
                    let inbox = Inbox()
                    let token = hub.observe(.count, by: inbox) { _, _ in }
                    hub.observe(.count, from: keeper, by: inbox) { _, _ in }
                    if Bool.random() { token.invalidate() } else { hub.unobserve(by: inbox) }
                }
            },
            {
                for _ in 0..<500 {
                    let subscription = hub.subscribe(.count) { _ in }
                    _ = subscription
                }
            },
        ])
        #expect(delivered.load(ordering: .relaxed) == 4_000)
    }
}

@Suite("NotificationHub notifications as an asynchronous sequence")
struct NotificationHubSequenceTests {
    private func relationCount(_ hub: NotificationHub, _ name: NotificationName<Int>) -> Int {
        hub.state.withLock { $0.channel(name.id, sender: nil) }?.liveRelations().count ?? 0
    }

    /// A consuming task cancelled while its loop body awaits something else
    /// calls no `next()`: the observation ends at the first post after the
    /// cancellation, and nothing posted after it is buffered or delivered.
    @Test func aConsumerCancelledWhileItsBodyAwaitsElsewhere_endsAtTheNextPost_andBuffersNothing() async {
        let hub = NotificationHub()
        let received = _Mutex<[Int]>([])
        let inBody = Flag()
        let parked = _Mutex<CheckedContinuation<Void, Never>?>(nil)
        let consumer = Task {
            var hasWaited = false
            for await notification in hub.notifications(named: .count) {
                received.withLock { $0.append(notification.payload) }
                guard !hasWaited else { continue }
                hasWaited = true
                // Something else, which ignores cancellation.
                await withCheckedContinuation { continuation in
                    parked.withLock { $0 = continuation }
                    inBody.set()
                }
            }
        }
        #expect(await eventually { relationCount(hub, .count) == 1 })
        hub.post(.count, payload: 1)
        #expect(await eventually { inBody.isSet }, "the first post never reached the loop body")
        consumer.cancel()
        #expect(relationCount(hub, .count) == 1, "nothing happened yet that could end it")
        hub.post(.count, payload: 2)  // the first post after the cancellation
        #expect(relationCount(hub, .count) == 0, "the post after the cancellation did not end it")
        for payload in 3...100 { hub.post(.count, payload: payload) }
        parked.withLock { $0?.resume() }
        await consumer.value
        #expect(received.withLock { $0 } == [1], "posts made after the cancellation reached the loop")
    }

    @Test func theSequenceYieldsPostsInOrder_andCancellationEndsItsRelation() async {
        let hub = NotificationHub()
        let received = _Mutex<[Int]>([])
        let started = Atomic<Bool>(false)
        let consumer = Task {
            var iterator = hub.notifications(named: .count).makeAsyncIterator()
            started.store(true, ordering: .releasing)
            while let notification = await iterator.next() {
                received.withLock { $0.append(notification.payload) }
            }
        }
        while !started.load(ordering: .acquiring) { await Task.yield() }
        while relationCount(hub, .count) == 0 { await Task.yield() }
        for value in 1...5 { hub.post(.count, payload: value) }
        for _ in 0..<2_000 where received.withLock({ $0.count }) < 5 { try? await Task.sleep(for: .milliseconds(1)) }
        #expect(received.withLock { $0 } == [1, 2, 3, 4, 5])
        consumer.cancel()
        await consumer.value
        #expect(relationCount(hub, .count) == 0, "cancellation left the relation")
    }

    @Test func theSequenceFinishesWhenTheHubDies() async {
        var hub: NotificationHub? = NotificationHub()
        var iterator = hub!.notifications(named: .count).makeAsyncIterator()
        hub!.post(.count, payload: 1)
        hub = nil
        #expect(await iterator.next()?.payload == 1)
        #expect(await iterator.next() == nil)
    }

    @Test func aSenderFilteredSequence_yieldsOnlyItsSendersPosts_andADroppedIteratorEndsItsRelation() async {
        let hub = NotificationHub()
        let sender = Sender()
        do {
            var iterator = hub.notifications(named: .count, from: sender).makeAsyncIterator()
            hub.post(.count, payload: 1, from: Sender())
            hub.post(.count, payload: 2, from: sender)
            #expect(await iterator.next()?.payload == 2)
        }
        let channel = hub.state.withLock { $0.channel(NotificationName<Int>.count.id, sender: sender) }
        #expect(channel?.liveRelations().isEmpty ?? true, "a dropped iterator left its relation")
        #expect(_ListenerProxy.of(sender, create: false)?._finalizerCount ?? 0 == 0, "nor its finalizer")
        #expect(_SenderWatch._count(of: sender) == 0, "nor its watch")
    }

    /// A `SafeObserver` sender: the sequence finishes inside its `deinit`,
    /// with nothing else happening in the hub.
    @Test(.timeLimit(.minutes(1)))
    func aSequenceFilteredOnASafeObserverSender_finishesWhenTheSenderDies() async {
        final class Store: SafeObserver, Sendable {
            let observerLifetime = ObserverLifetime()
        }
        let hub = NotificationHub()
        var store: Store? = Store()
        let sequence = hub.notifications(named: .count, from: store!)
        let finished = Flag()
        let received = Atomic<Int>(0)
        let consumer = Task {
            for await _ in sequence { received.add(1, ordering: .relaxed) }
            finished.set()
        }
        await Task.yield()
        // The consumer's iterator may not exist yet: wait until a post reaches it.
        #expect(
            await eventually {
                hub.post(.count, payload: 1, from: store!)
                return received.load(ordering: .relaxed) > 0
            })
        store = nil
        #expect(await eventually { finished.isSet }, "the sequence did not finish when its sender died")
        consumer.cancel()
    }

    /// A plain sender: the sequence yields its posts, then finishes once
    /// the watch of plain senders finds it dead (nothing else happens).
    @Test(.timeLimit(.minutes(1)))
    func aSequenceFilteredOnAPlainSender_yieldsItsPosts_thenFinishesWhenTheSenderDies() async {
        let hub = NotificationHub()
        var sender: Sender? = Sender()
        var iterator = hub.notifications(named: .count, from: sender!).makeAsyncIterator()
        hub.post(.count, payload: 1, from: sender!)
        #expect(await iterator.next()?.payload == 1)
        sender = nil
        #expect(await iterator.next() == nil)
    }

    /// Sequences cancelled while their sender lives leave no finalizer on it.
    @Test func cancelledSequencesLeaveNoFinalizerOnALiveSender() async {
        let hub = NotificationHub()
        let sender = Sender()
        for _ in 0..<1_000 {
            let task = Task { for await _ in hub.notifications(named: .count, from: sender) {} }
            task.cancel()
            await task.value
        }
        #expect(_ListenerProxy.of(sender, create: false)?._finalizerCount ?? 0 == 0)
        #expect(_SenderWatch._count(of: sender) == 0, "nor a watch")
        hub.post(.count, payload: 1, from: sender)
    }

    /// Notifications.md: a sender's death releases what the sequence
    /// buffered when it is noticed, not at the consumer's next `next()`
    /// (round 5, E3): inside a `SafeObserver` sender's `deinit`, within the
    /// probe's half second for another sender.
    @Test(arguments: [false, true])
    func aSendersDeath_releasesWhatTheSequenceBuffered_withoutANext(senderIsSafeObserver: Bool) async {
        final class SafeSender: SafeObserver, Sendable {
            let observerLifetime = ObserverLifetime()
        }
        let hub = NotificationHub()
        let name = NotificationName<Payload>("sequence.released")
        let lifetime = LifetimeCounter()
        var sender: AnyObject? = senderIsSafeObserver ? SafeSender() : Sender()
        var iterator = hub.notifications(named: name, from: sender!).makeAsyncIterator()
        for _ in 1...3 { hub.post(name, payload: Payload(lifetime: lifetime), from: sender!) }
        #expect(lifetime.liveCount == 3)
        sender = nil
        if senderIsSafeObserver {
            #expect(lifetime.liveCount == 0, "released in the sender's deinit")
        } else {
            #expect(await eventually { lifetime.liveCount == 0 }, "released once the probe saw the death")
        }
        #expect(await iterator.next() == nil)
    }

    /// A task cancelled before its first `next()` is told nothing posted
    /// after the cancellation (round 5, E1): the task that made the iterator
    /// is its consumer from the start.
    @Test func aTaskCancelledBeforeItsFirstNext_isToldNothingPostedAfter() async {
        let hub = NotificationHub()
        let posted = Flag()
        let consumer = Task.detached { () -> Int? in
            var iterator = hub.notifications(named: .count).makeAsyncIterator()
            while !Task.isCancelled { await Task.yield() }
            hub.post(.count, payload: 1)
            posted.set()
            return await iterator.next()?.payload
        }
        consumer.cancel()
        #expect(await consumer.value == nil, "a notification posted after the cancellation was delivered")
        #expect(posted.isSet)
        #expect(hub.relations().isEmpty)
    }

    /// PostedNotifications: "Nothing is yielded after the sender died" —
    /// not even what was buffered for a consumer busy when it died, whether
    /// the sender adopts `SafeObserver` (its sequences finish in its
    /// `deinit`) or not (the watch finds it dead later): the sequence ends
    /// there, and what it buffered is released (issue 32, D4).
    @Test(arguments: [false, true])
    func notificationsBufferedWhenTheSenderDies_areNeverYielded_andAreReleased(senderIsSafeObserver: Bool) async {
        final class SafeSender: SafeObserver, Sendable {
            let observerLifetime = ObserverLifetime()
        }
        let hub = NotificationHub()
        let name = NotificationName<Payload>("sequence.payload")
        let lifetime = LifetimeCounter()
        var sender: AnyObject? = senderIsSafeObserver ? SafeSender() : Sender()
        var iterator = hub.notifications(named: name, from: sender!).makeAsyncIterator()
        for _ in 1...3 { hub.post(name, payload: Payload(lifetime: lifetime), from: sender!) }
        #expect(await iterator.next() != nil, "the first post is yielded while the sender lives")
        #expect(lifetime.liveCount == 2, "two posts buffered")
        sender = nil
        #expect(await iterator.next() == nil, "a notification buffered before the sender died was yielded after it")
        #expect(await iterator.next() == nil, "the sequence goes on after its end")
        #expect(lifetime.liveCount == 0, "the buffered notifications outlive the sequence's end")
        #expect(hub.relations().isEmpty, "the sequence's relation outlives its end")
    }
}

@MainActor
@Suite("NotificationHub and actors")
struct NotificationHubIsolationTests {
    @MainActor
    final class Badge {
        var counts: [Int] = []
    }

    @Test func anObserverRegisteredFromTheMainActor_receivesPostsMadeElsewhere_onIt_inOrder() async {
        let hub = NotificationHub()
        let badge = Badge()
        hub.observe(.count, by: badge) { badge, notification in
            MainActor.preconditionIsolated()
            badge.counts.append(notification.payload)
        }
        await Task.detached {
            for value in 1...100 { hub.post(.count, payload: value) }
        }.value
        for _ in 0..<2_000 where badge.counts.count < 100 { try? await Task.sleep(for: .milliseconds(2)) }
        #expect(badge.counts == Array(1...100))
        hub.post(.count, payload: 101)  // on the main actor: synchronous
        #expect(badge.counts.last == 101)
    }

    /// An actor of its own receiving posts from several threads at once:
    /// each poster's notifications arrive in the order it posted them, on
    /// the actor; a post made on the actor is delivered at once, after what
    /// was queued before it.
    @Test func anObserverRegisteredFromAnActor_receivesEachPostersNotificationsOnIt_inOrder() async {
        actor Tally {
            var received: [Int] = []
            func watch(_ hub: NotificationHub) {
                hub.observe(.count, by: self) { tally, notification in
                    tally.preconditionIsolated()
                    tally.received.append(notification.payload)
                }
            }
            func postHere(_ hub: NotificationHub, _ value: Int) -> Int? {
                hub.post(.count, payload: value)
                return received.last
            }
        }
        let hub = NotificationHub()
        let tally = Tally()
        await tally.watch(hub)
        let posters = 4
        let perPoster = 200
        await withTaskGroup(of: Void.self) { group in
            for poster in 0..<posters {
                group.addTask {
                    for i in 0..<perPoster { hub.post(.count, payload: poster * 1_000 + i) }
                }
            }
        }
        var received = await tally.received
        for _ in 0..<2_000 where received.count < posters * perPoster {
            try? await Task.sleep(for: .milliseconds(2))
            received = await tally.received
        }
        #expect(received.count == posters * perPoster)
        for poster in 0..<posters {
            let mine = received.filter { $0 / 1_000 == poster }
            #expect(mine == (0..<perPoster).map { poster * 1_000 + $0 })
        }
        #expect(await tally.postHere(hub, 9_999) == 9_999, "a post made on the actor is delivered synchronously")
    }
}
