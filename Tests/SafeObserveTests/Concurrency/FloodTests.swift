import Synchronization
import Testing

@testable import SafeObserve

/// Changes, posts and enqueued notifications made on another thread faster
/// than an actor delivers them never hold that actor: a job the actor is
/// given meanwhile runs after at most one delivery job's worth of work
/// (``_Mailbox/deliveriesPerJob``, `NotificationHub.Queue`'s
/// `postsPerJob`, 1,024 each), however long the flood has lasted (attack round 11, F2: each job
/// delivered the whole backlog it found, which grew while it ran, and an
/// empty main-actor job waited over 3 s).
///
/// Counted in deliveries, not time: a handler that takes 20 µs against a
/// producer that does not wait builds a backlog fast; the other job is
/// given to the actor at the 5,000th delivery, once jobs have grown large.
@Suite("A flood never holds the actor", .serialized)
struct FloodTests {
    /// Deliveries allowed between the other job's arrival and its run: one
    /// job's (the queue's posts or the mailbox's deliveries; the same bound),
    /// and slack for the deliveries on their way when it arrives.
    fileprivate static let allowance = Int(_Mailbox.deliveriesPerJob) + 64

    @Test func changesMadeElsewhere_holdTheMainActorForOneJobAtMost() async {
        let model = FloodModel()
        let flood = Flood()
        let listener = Peer()
        let token = await MainActor.run {
            model.safeObserve(\.count, by: listener) { _, _, _ in
                flood.delivered { Task { @MainActor in flood.otherJobRan() } }
            }
        }
        flood.produce { model.count = $0 }
        await flood.check()
        token.invalidate()
        withExtendedLifetime(listener) {}
    }

    @Test func changesMadeElsewhere_holdADefaultActorForOneJobAtMost() async {
        let model = FloodModel()
        let flood = Flood()
        let listener = FloodActor()
        let token = model.safeObserve(\.count, by: listener) { listener, _, _ in
            // Isolated to `listener`: a job on it.
            flood.delivered {
                Task {
                    _ = listener
                    flood.otherJobRan()
                }
            }
        }
        flood.produce { model.count = $0 }
        await flood.check()
        token.invalidate()
    }

    @Test func postsMadeElsewhere_holdTheMainActorForOneJobAtMost() async {
        let hub = NotificationHub()
        let flood = Flood()
        let listener = Peer()
        await MainActor.run {
            _ = hub.observe(.flood, by: listener) { _, _ in
                flood.delivered { Task { @MainActor in flood.otherJobRan() } }
            }
        }
        flood.produce { hub.post(.flood, payload: $0) }
        await flood.check()
        withExtendedLifetime(listener) {}
    }

    @Test func notificationsEnqueuedElsewhere_holdTheQueuesActorForOneJobAtMost() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub, actor: MainActor.shared)
        let flood = Flood()
        let listener = Peer()
        await MainActor.run {
            _ = hub.observe(.flood, by: listener) { _, _ in
                flood.delivered { Task { @MainActor in flood.otherJobRan() } }
            }
        }
        flood.produce { queue.enqueue(.flood, payload: $0, postingStyle: .asap, coalescing: []) }
        await flood.check()
        withExtendedLifetime((listener, queue)) {}
    }
}

extension NotificationName<Int> {
    fileprivate static let flood = NotificationName<Int>("FloodTests.flood")
}

// @unchecked Sendable: `count` is written by the producing thread only,
// after the relation that reads it was registered.
private final class FloodModel: SafeObservable, @unchecked Sendable {
    @Observed var count = 0
}

private actor FloodActor {}

/// One flood: a thread produces until the other job ran (or 300,000
/// changes); the handler counts and dwells 20 µs.
private final class Flood: Sendable {
    private let count = Atomic<Int>(0)
    private let enqueuedAt = Atomic<Int>(0)
    private let ranAt = Atomic<Int>(0)
    private let stopped = Flag()

    /// In the handler, on the actor: counts the delivery, dwells, and at the
    /// 5,000th gives the actor another job with `giveJob`.
    func delivered(giveJob: () -> Void) {
        let delivered = count.add(1, ordering: .relaxed).newValue
        if delivered == 5_000 {
            enqueuedAt.store(delivered, ordering: .relaxed)
            giveJob()
        }
        let end = ContinuousClock.now + .microseconds(20)
        while ContinuousClock.now < end {}
    }

    /// The other job, on the actor.
    func otherJobRan() {
        ranAt.store(count.load(ordering: .relaxed), ordering: .relaxed)
        stopped.set()
    }

    /// Starts the producing thread, which calls `change` with 1, 2, 3…
    func produce(_ change: @escaping @Sendable (Int) -> Void) {
        _ = Threads(1) { [self] _ in
            var value = 0
            while !stopped.isSet, value < 300_000 {
                value += 1
                change(value)
            }
        }
    }

    func check() async {
        let deadline = ContinuousClock.now + .seconds(60)
        while !stopped.isSet, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(5)) }
        let ran = ranAt.load(ordering: .relaxed) > 0
        stopped.set()
        #expect(ran, "the other job never ran")
        let waited = ranAt.load(ordering: .relaxed) - enqueuedAt.load(ordering: .relaxed)
        print("FloodTests: the other job waited for \(waited) deliveries")
        #expect(waited <= FloodTests.allowance, "the other job waited for \(waited) deliveries")
    }
}
