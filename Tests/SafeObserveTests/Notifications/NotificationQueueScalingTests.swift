// What a queue operation costs does not depend on how many notifications
// are pending: each test compares the n-th operation with an early one in
// one process, as a ratio with a generous threshold (the linear scans these
// tests caught gave 8–17×), never an absolute time. Every wait is bounded.

import Synchronization
import Testing

@testable import SafeObserve

extension NotificationName where Payload == Int {
    fileprivate static let pending = NotificationName("queue.scaling.pending")
    fileprivate static let measured = NotificationName("queue.scaling.measured")
}

/// Runs closures isolated to itself: a queue's actor, on which a batch of
/// enqueues runs as one job (so the queue's own job cannot run in between).
private actor QueueHost {
    func run<T: Sendable>(_ body: @Sendable () -> T) -> T { body() }
}

private final class Sink: Sendable {}

@Suite("Notification queue: cost per notification", .serialized)
struct NotificationQueueScalingTests {
    @Test func enqueueWithoutCoalescing_doesNotScaleWithThePendingNotifications() async {
        let hub = NotificationHub()
        let host = QueueHost()
        let (few, many) = await host.run { () -> (Duration, Duration) in
            let queue = NotificationHub.Queue(hub: hub, actor: host)
            var payload = 0
            func enqueue(_ count: Int) {
                for _ in 0..<count {
                    payload += 1
                    queue.enqueue(.pending, payload: payload, postingStyle: .asap, coalescing: [])
                }
            }
            enqueue(500)
            let few = fastest(of: 5) { enqueue(100) }  // 500–1,000 pending
            enqueue(15_000)
            let many = fastest(of: 5) { enqueue(100) }  // 16,000–16,500 pending
            // Not posted: the queue's job (already scheduled) finds nothing.
            queue.dequeue(.pending, coalescing: .onName)
            return (few, many)
        }
        let ratio = many / few
        #expect(
            ratio < 4,
            "enqueue with 16,000 pending costs \(ratio)× what it costs with 500 (\(describe(few)) → \(describe(many)) per 100)"
        )
    }

    @Test func enqueueCoalescing_costsTheMatches_notThePendingNotifications() async {
        let hub = NotificationHub()
        let host = QueueHost()
        let senders = (0..<16_000).map { _ in Sink() }
        let lone = Sink()
        let (few, many) = await host.run { () -> (Duration, [Duration]) in
            let queue = NotificationHub.Queue(hub: hub, actor: host)
            var payload = 0
            /// Each merges with the one before (same name, same sender).
            func enqueueCoalescing(_ count: Int) {
                for _ in 0..<count {
                    payload += 1
                    queue.enqueue(.measured, payload: payload, from: senders[0], postingStyle: .asap)
                }
            }
            for sender in senders[..<500] { queue.enqueue(.pending, payload: 0, from: sender, postingStyle: .asap) }
            let few = fastest(of: 5) { enqueueCoalescing(100) }  // 500 others pending
            for sender in senders[500...] { queue.enqueue(.pending, payload: 0, from: sender, postingStyle: .asap) }
            let many = fastest(of: 5) { enqueueCoalescing(100) }  // 16,000 others pending
            // Every option of the mask: each must cost its matches only.
            let byName = fastest(of: 5) {
                for _ in 0..<100 { queue.enqueue(.measured, payload: 0, postingStyle: .asap, coalescing: .onName) }
            }
            let bySender = fastest(of: 5) {
                for _ in 0..<100 {
                    queue.enqueue(.measured, payload: 0, from: lone, postingStyle: .asap, coalescing: .onSender)
                }
            }
            let dequeue = fastest(of: 5) {
                for _ in 0..<100 {
                    queue.enqueue(.measured, payload: 0, postingStyle: .asap, coalescing: [])
                    queue.dequeue(.measured, coalescing: .onName)
                }
            }
            #expect(queue.count == 16_000, "the dequeues removed every `.measured` one")
            queue.dequeue(.pending, coalescing: .onName)
            queue.dequeue(.measured, coalescing: .onName)
            return (few, [many, byName, bySender, dequeue])
        }
        for (label, duration) in zip(["on name and sender", "on name", "on sender", "enqueue + dequeue"], many) {
            let ratio = duration / few
            #expect(
                ratio < 4,
                "coalescing \(label) with 16,000 others pending costs \(ratio)× what coalescing on name and sender costs with 500 (\(describe(few)) → \(describe(duration)) per 100)"
            )
        }
        withExtendedLifetime((senders, lone)) {}
    }

    @Test func delivery_doesNotScaleWithThePendingNotifications() async {
        let hub = NotificationHub()
        let host = QueueHost()
        let pending = 16_000
        let stamps = Mutex<[ContinuousClock.Instant]>([])
        stamps.withLock { $0.reserveCapacity(pending) }
        let sink = Sink()
        hub.observe(.pending, by: sink, isolation: nil) { _, _ in
            let now = ContinuousClock.now
            stamps.withLock { $0.append(now) }
        }
        let queue = NotificationHub.Queue(hub: hub, actor: host)
        await host.run {
            for payload in 0..<pending {
                queue.enqueue(.pending, payload: payload, postingStyle: .asap, coalescing: [])
            }
        }
        let delivered = await eventually { stamps.withLock { $0.count } == pending }
        #expect(delivered, "the queue did not deliver \(pending) notifications within the deadline")
        guard delivered else { return }
        let times = stamps.withLock { $0 }
        /// The median time between two posts in `window` (robust to a
        /// preempted post).
        func medianInterval(_ window: Range<Int>) -> Duration {
            window.dropFirst().map { times[$0] - times[$0 - 1] }.sorted()[(window.count - 1) / 2]
        }
        // The first 1,000 posts, with ~16,000 pending, against the last 1,000, with < 1,000.
        let early = medianInterval(0..<1_000)
        let late = medianInterval((pending - 1_000)..<pending)
        let ratio = early / late
        #expect(
            ratio < 4,
            "a post with 16,000 pending costs \(ratio)× what it costs with < 1,000 (median \(describe(late)) → \(describe(early)))"
        )
        withExtendedLifetime((queue, sink)) {}
    }
}
