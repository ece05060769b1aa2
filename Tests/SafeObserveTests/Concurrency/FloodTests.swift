import Foundation
import Synchronization
import Testing

@testable import SafeObserve

/// Changes, posts and enqueued notifications made on another thread faster
/// than an actor delivers them never hold that actor: a job the actor is
/// given meanwhile runs after at most one delivery job's worth of work
/// (``_Mailbox/deliveriesPerJob``, `NotificationHub.Queue`'s
/// `postsPerJob`, 1,024 each), however large the backlog (attack round 11,
/// F2: each job delivered the whole backlog it found, which grew while it
/// ran, and an empty main-actor job waited over 3 s).
///
/// Deterministic, and light on the machine: the actor is held (for the few
/// milliseconds the test takes to make 5,000 changes from its task), then
/// released; the handler only counts, and gives the actor a probe job at
/// the 1st, 1,000th, 2,000th, 3,000th and 4,000th delivery. Without the
/// bound the first job delivers all 5,000 and the first probe waits 4,999
/// deliveries. (An earlier version had each delivery wait for a producing
/// thread: in the full suite under TSan each wait took milliseconds, one
/// flood held the main actor for minutes, and another test's main-actor job
/// timed out.)
@Suite("A flood never holds the actor", .serialized)
struct FloodTests {
    /// Deliveries allowed between the probe's arrival and its run: one
    /// job's (the queue's posts or the mailbox's deliveries; the same bound),
    /// and slack for the deliveries on their way when it arrives.
    fileprivate static let allowance = Int(_Mailbox.deliveriesPerJob) + 64
    fileprivate static let changes = 5_000

    @Test func changesMadeElsewhere_holdTheMainActorForOneJobAtMost() async {
        let model = FloodModel()
        let flood = Flood()
        let listener = Peer()
        let token = await MainActor.run {
            model.safeObserve(\.count, by: listener) { _, _, _ in
                flood.delivered { probe in Task { @MainActor in flood.probeRan(probe) } }
            }
        }
        await flood.run(holding: .mainActor) {
            for value in 1...Self.changes { model.count = value }
        }
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
                    flood.probeRan(probe)
                }
            }
        }
        await flood.run(holding: .actor(listener)) {
            for value in 1...Self.changes { model.count = value }
        }
        token.invalidate()
    }

    @Test func postsMadeElsewhere_holdTheMainActorForOneJobAtMost() async {
        let hub = NotificationHub()
        let flood = Flood()
        let listener = Peer()
        await MainActor.run {
            _ = hub.observe(.flood, by: listener) { _, _ in
                flood.delivered { probe in Task { @MainActor in flood.probeRan(probe) } }
            }
        }
        await flood.run(holding: .mainActor) {
            for value in 1...Self.changes { hub.post(.flood, payload: value) }
        }
        withExtendedLifetime(listener) {}
    }

    @Test func notificationsEnqueuedElsewhere_holdTheQueuesActorForOneJobAtMost() async {
        let hub = NotificationHub()
        let queue = NotificationHub.Queue(hub: hub, actor: MainActor.shared)
        let flood = Flood()
        let listener = Peer()
        await MainActor.run {
            _ = hub.observe(.flood, by: listener) { _, _ in
                flood.delivered { probe in Task { @MainActor in flood.probeRan(probe) } }
            }
        }
        await flood.run(holding: .mainActor) {
            for value in 1...Self.changes {
                queue.enqueue(.flood, payload: value, postingStyle: .asap, coalescing: [])
            }
        }
        withExtendedLifetime((listener, queue)) {}
    }
}

extension NotificationName<Int> {
    fileprivate static let flood = NotificationName<Int>("FloodTests.flood")
}

// @unchecked Sendable: `count` is written by the test's task only, after
// the relation that reads it was registered.
private final class FloodModel: SafeObservable, @unchecked Sendable {
    @Observed var count = 0
}

private actor FloodActor {
    /// Holds the actor with a job until `release` is signalled; whether the
    /// job began within a minute (see ``holdMainActor(until:)``).
    nonisolated func hold(until release: DispatchSemaphore) async -> Bool {
        let began = Flag()
        Task { await self.block(began, release) }
        return await eventually { began.isSet }
    }

    private func block(_ began: Flag, _ release: DispatchSemaphore) {
        began.set()
        release.wait()
    }
}

/// The actor a flood holds while the changes are made.
private enum Hold {
    case mainActor
    case actor(FloodActor)
}

/// One flood: the actor is held while the test makes its changes, then
/// released; the handler counts, and gives the actor a probe job at the
/// 1st delivery and every 1,000th after, up to the 4,000th.
private final class Flood: Sendable {
    private static let probes = 5
    private let count = Atomic<Int>(0)
    /// Per probe: the delivery that gave the job, and the count when it ran.
    private let given = _Mutex([Int](repeating: 0, count: probes))
    private let ran = _Mutex([Int](repeating: 0, count: probes))
    private let probesRan = Flag()

    /// In the handler, on the actor: counts the delivery, and gives a probe
    /// job with `giveJob` where due.
    func delivered(giveJob: (Int) -> Void) {
        let delivered = count.add(1, ordering: .relaxed).newValue
        let probe = delivered == 1 ? 0 : delivered.isMultiple(of: 1_000) ? delivered / 1_000 : Self.probes
        guard probe < Self.probes else { return }
        given.withLock { $0[probe] = delivered }
        giveJob(probe)
    }

    /// Probe job `probe`, on the actor.
    func probeRan(_ probe: Int) {
        let now = count.load(ordering: .relaxed)
        let all = ran.withLock {
            $0[probe] = now
            return !$0.contains(0)
        }
        if all { probesRan.set() }
    }

    /// Holds the actor with `hold`, runs `produce`, releases the actor, and
    /// checks that each probe job ran within one job's worth of deliveries.
    func run(holding hold: Hold, _ produce: () -> Void) async {
        let release = DispatchSemaphore(value: 0)
        let held =
            switch hold {
            case .mainActor: await holdMainActor(until: release)
            case .actor(let actor): await actor.hold(until: release)
            }
        #expect(held, "the actor never ran the holding job")
        produce()
        release.signal()
        let finished = await eventually {
            self.probesRan.isSet && self.count.load(ordering: .relaxed) == FloodTests.changes
        }
        #expect(
            finished,
            "delivered \(count.load(ordering: .relaxed)) of \(FloodTests.changes); probes ran: \(ran.withLock { $0 })")
        let given = given.withLock { $0 }
        let ran = ran.withLock { $0 }
        let waits = zip(ran, given).map { $0 - $1 }
        print("FloodTests: the probe jobs waited for \(waits) deliveries")
        #expect(waits.max()! <= FloodTests.allowance, "a probe job waited for \(waits.max()!) deliveries")
    }
}
