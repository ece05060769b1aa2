import Foundation
import Synchronization
import Testing

@testable import SafeObserve

/// Changes, posts and enqueued notifications made on another thread faster
/// than an actor delivers them never hold that actor: a job the actor is
/// given meanwhile runs after at most one delivery job's worth of work
/// (``_Mailbox/deliveriesPerJob``, `NotificationHub.Queue`'s
/// `postsPerJob`, 1,024 each), however long the flood has lasted (attack
/// round 11, F2: each job delivered the whole backlog it found, which grew
/// while it ran, and an empty main-actor job waited over 3 s).
///
/// Counted in deliveries, and driven by the deliveries, not by time: each
/// delivery has a producing thread make two more changes (and waits until it
/// has), so the backlog a job finds grows about threefold per job whatever
/// the machine's speed or load, and the actor is never held by a sleeping
/// handler. Probe jobs are given to the actor every 500 deliveries up to the
/// 4,000th; without the bound, the jobs from about the 2,000th delivery on
/// are longer than 2,000 deliveries, so later probes wait longer than the
/// allowance.
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

/// One flood: a producing thread makes changes when a delivery asks it to
/// (two per delivery, up to ``changes`` in all), and the handler gives the
/// actor a probe job at every 500th delivery up to the 4,000th.
private final class Flood: Sendable {
    private static let probes = 8
    private static let changes = 16_000
    private let count = Atomic<Int>(0)
    /// Per probe: the delivery that gave the job, and the count when it ran.
    private let given = _Mutex([Int](repeating: 0, count: probes))
    private let ran = _Mutex([Int](repeating: 0, count: probes))
    private let probesRan = Flag()
    private let producer = Producer(upTo: changes)

    /// In the handler, on the actor: counts the delivery, gives a probe job
    /// with `giveJob` where due, and has two more changes made elsewhere.
    func delivered(giveJob: (Int) -> Void) {
        let delivered = count.add(1, ordering: .relaxed).newValue
        if delivered.isMultiple(of: 500), delivered / 500 <= Self.probes {
            let probe = delivered / 500 - 1
            given.withLock { $0[probe] = delivered }
            giveJob(probe)
        }
        producer.make(2)
    }

    /// Probe job `probe`, on the actor.
    func otherJobRan(_ probe: Int) {
        let now = count.load(ordering: .relaxed)
        let all = ran.withLock {
            $0[probe] = now
            return !$0.contains(0)
        }
        if all { probesRan.set() }
    }

    /// Starts the producing thread, which calls `change` with 1, 2, 3…, and
    /// has it make the first change.
    func produce(_ change: @escaping @Sendable (Int) -> Void) {
        producer.start(change)
        producer.make(1)
    }

    func check() async {
        let finished = await eventually { self.probesRan.isSet && self.producer.isDone }
        producer.stop()
        #expect(finished, "the flood did not end: \(producer.made) of \(Self.changes) changes made")
        let given = given.withLock { $0 }
        let ran = ran.withLock { $0 }
        #expect(!ran.contains(0), "a probe job never ran: \(ran)")
        let waits = zip(ran, given).map { $0 - $1 }
        print("FloodTests: the probe jobs waited for \(waits) deliveries")
        #expect(waits.max()! <= FloodTests.allowance, "a probe job waited for \(waits.max()!) deliveries")
    }
}

/// A thread that makes changes on request: ``make(_:)`` returns once they
/// are made, so a handler that asks for them sees them queued behind it.
private final class Producer: Sendable {
    private let limit: Int
    private let requested = _Mutex(0)
    private let request = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    private let stopped = Flag()
    private let count = Atomic<Int>(0)

    init(upTo limit: Int) { self.limit = limit }

    var made: Int { count.load(ordering: .acquiring) }
    var isDone: Bool { made >= limit }

    func start(_ change: @escaping @Sendable (Int) -> Void) {
        _ = Threads(1) { [self] _ in
            while true {
                request.wait()
                if stopped.isSet { return }
                let wanted = requested.withLock { $0 }
                for _ in 0..<wanted {
                    let value = count.load(ordering: .relaxed) + 1
                    guard value <= limit else { break }
                    change(value)
                    count.store(value, ordering: .releasing)
                }
                done.signal()
            }
        }
    }

    /// Has the thread make `changes` more (fewer once ``made`` reaches the
    /// limit), and waits until it has. One caller at a time: the actor's.
    func make(_ changes: Int) {
        guard !isDone else { return }
        requested.withLock { $0 = changes }
        request.signal()
        done.wait()
    }

    func stop() {
        stopped.set()
        request.signal()
    }
}
