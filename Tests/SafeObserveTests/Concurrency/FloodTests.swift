import Synchronization
import Testing

@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Changes, posts and enqueued notifications made on another thread faster
/// than an actor delivers them never hold that actor: a job the actor is
/// given meanwhile runs after at most one delivery job's worth of work
/// (``_Mailbox/deliveriesPerJob``, `NotificationHub.Queue`'s
/// `postsPerJob`, 1,024 each), however long the flood has lasted (attack round 11, F2: each job
/// delivered the whole backlog it found, which grew while it ran, and an
/// empty main-actor job waited over 3 s).
///
/// Counted in deliveries, not time: a handler that sleeps 400 µs against a
/// producer that changes 20 times a millisecond builds a backlog that grows
/// about tenfold with each job; probe jobs are given to the actor
/// every 500 deliveries, and each must run within one job's worth.
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
                flood.delivered { probe in Task { @MainActor in flood.otherJobRan(probe) } }
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
            flood.delivered { probe in
                Task {
                    _ = listener
                    flood.otherJobRan(probe)
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
                flood.delivered { probe in Task { @MainActor in flood.otherJobRan(probe) } }
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
                flood.delivered { probe in Task { @MainActor in flood.otherJobRan(probe) } }
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

/// One flood: a thread produces until the last of four other jobs ran (or
/// 300,000 changes); the handler counts and sleeps 400 µs, and gives the
/// actor another job at every 500th delivery up to the 2,000th (so that
/// some land early in a large job, wherever the jobs begin).
private final class Flood: Sendable {
    private static let probes = 4
    private let count = Atomic<Int>(0)
    /// Per probe: the delivery that gave the job, and the count when it ran.
    private let given = _Mutex([Int](repeating: 0, count: probes))
    private let ran = _Mutex([Int](repeating: 0, count: probes))
    private let stopped = Flag()

    /// In the handler, on the actor: counts the delivery, gives a probe job
    /// with `giveJob` where due, and dwells.
    func delivered(giveJob: (Int) -> Void) {
        let delivered = count.add(1, ordering: .relaxed).newValue
        if delivered.isMultiple(of: 500), delivered / 500 <= Self.probes {
            let probe = delivered / 500 - 1
            given.withLock { $0[probe] = delivered }
            giveJob(probe)
        }
        // Asleep, not spinning: the flood must not load the machine (the
        // suite's timing-ratio tests run beside it).
        usleep(400)
    }

    /// Probe job `probe`, on the actor.
    func otherJobRan(_ probe: Int) {
        let now = count.load(ordering: .relaxed)
        let all = ran.withLock {
            $0[probe] = now
            return !$0.contains(0)
        }
        if all { stopped.set() }
    }

    /// Starts the producing thread, which calls `change` with 1, 2, 3…, in
    /// bursts of 20 a millisecond apart: about ten times faster than the
    /// handler delivers, without keeping a core busy.
    func produce(_ change: @escaping @Sendable (Int) -> Void) {
        _ = Threads(1) { [self] _ in
            var value = 0
            while !stopped.isSet, value < 300_000 {
                value += 1
                change(value)
                if value.isMultiple(of: 20) { usleep(1_000) }
            }
        }
    }

    func check() async {
        let deadline = ContinuousClock.now + .seconds(60)
        while !stopped.isSet, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(5)) }
        stopped.set()
        let given = given.withLock { $0 }
        let ran = ran.withLock { $0 }
        #expect(!ran.contains(0), "a probe job never ran: \(ran)")
        let waits = zip(ran, given).map { $0 - $1 }
        print("FloodTests: the probe jobs waited for \(waits) deliveries")
        #expect(waits.max()! <= FloodTests.allowance, "a probe job waited for \(waits.max()!) deliveries")
    }
}
