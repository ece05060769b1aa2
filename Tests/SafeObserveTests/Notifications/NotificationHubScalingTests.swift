// The hub's complexity claims, each measured as a late operation against an
// early one in one process: a ratio with a generous threshold (the defects
// these pin cost 10–1,000×), never an absolute time.

import Testing

@testable import SafeObserve

extension NotificationName where Payload == Int {
    fileprivate static let scaled = NotificationName("NotificationHubScalingTests.scaled")
    fileprivate static let crowded = NotificationName("NotificationHubScalingTests.crowded")
}

/// A plain class (not a `SafeObserver`): a sender or a listener.
private final class Plain: Sendable {}

/// A sender that adopts `SafeObserver`.
private final class Store: SafeObserver, Sendable {
    let observerLifetime = ObserverLifetime()
}

@Suite(
    "NotificationHub scaling", .serialized,
    .disabled(if: StressConfig.isSanitized, "a sanitizer's own costs would be measured, not the hub's"))
struct NotificationHubScalingTests {
    /// `unobserve(by:)` visits the listener's relations, not every channel of
    /// the hub.
    @Test func unobserveByAListener_doesNotScaleWithTheHubsOtherChannels() {
        let hub = NotificationHub()
        let crowd = Plain()
        let senders = (0..<5_000).map { _ in Plain() }
        /// 50 × (observe one name + unobserve(by:)) by a listener with one relation.
        func observeAndUnobserveBy() -> Duration {
            let listener = Plain()
            return fastest(of: 3) {
                for _ in 0..<50 {
                    hub.observe(.scaled, by: listener, isolation: nil) { _, _ in }
                    hub.unobserve(by: listener)
                }
            }
        }
        for sender in senders[..<8] { hub.observe(.crowded, from: sender, by: crowd, isolation: nil) { _, _ in } }
        let few = observeAndUnobserveBy()  // 8 other channels
        for sender in senders[8...] { hub.observe(.crowded, from: sender, by: crowd, isolation: nil) { _, _ in } }
        let many = observeAndUnobserveBy()  // 5,000 other channels
        let ratio = many / few
        #expect(
            ratio < 4,
            "unobserve(by:) with 5,000 other channels costs \(ratio)× what it costs with 8 (\(describe(few)) → \(describe(many)) per 50)"
        )
        withExtendedLifetime((senders, crowd)) {}
    }

    /// Registering on a new sender sweeps a bounded number of old channels,
    /// however many senders died before.
    @Test func registrationAfterManySendersDied_doesNotScaleWithTheDeadSendersChannels() {
        /// Registrations on new senders (each creating a sender channel and
        /// sweeping two old ones) after `dead` senders with channels died.
        func registrations(afterDeadSenders dead: Int) -> Duration {
            let hub = NotificationHub()
            let listener = Plain()
            do {
                let senders = (0..<dead).map { _ in Plain() }
                for sender in senders { hub.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in } }
            }  // every one of them dies here; their channels wait for the sweep
            let fresh = (0..<3 * 64).map { _ in Plain() }
            var batch = 0
            let duration = fastest(of: 3) {
                for sender in fresh[(batch * 64)..<(batch * 64 + 64)] {
                    hub.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in }
                }
                batch += 1
            }
            withExtendedLifetime((fresh, listener, hub)) {}
            return duration
        }
        let early = registrations(afterDeadSenders: 1_024)
        let late = registrations(afterDeadSenders: 131_072)
        let ratio = late / early
        #expect(
            ratio < 4,
            "registration after 131,072 senders died costs \(ratio)× what it costs after 1,024 (\(describe(early)) → \(describe(late)) per 64)"
        )
    }

    /// A hub's death ends each of its relations in O(1), however many one
    /// listener has: the listener's table is not left with one probe run as
    /// long as itself (removals in the hub's table order used to do that,
    /// making the death quadratic: 8,192 channels took 0.5 s, 32,768 took 7).
    @Test func aHubsDeath_endsEachRelationInConstantTime_forOneListenerWithManySenders() {
        /// The hub's death, per relation, with `count` senders of one listener.
        func death(of count: Int) -> Duration {
            let clock = ContinuousClock()
            var best = Duration.seconds(1_000_000)
            for _ in 0..<3 {
                var hub: NotificationHub? = NotificationHub()
                let listener = Plain()
                let senders = (0..<count).map { _ in Plain() }
                for sender in senders { hub!.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in } }
                best = min(best, clock.measure { hub = nil })
                withExtendedLifetime((senders, listener)) {}
            }
            return best / count
        }
        let early = death(of: 1_024)
        let late = death(of: 32_768)
        let ratio = late / early
        #expect(
            ratio < 4,
            "a hub's death costs \(ratio)× per relation with 32,768 senders what it costs with 1,024 (\(describe(early)) → \(describe(late)))"
        )
    }

    /// Dropping the iterator of one of *k* sequences filtered on one sender
    /// is O(1), whether the sender is a plain class or a `SafeObserver`.
    @Test(arguments: [false, true])
    func endingOneOfManySequencesOnOneSender_doesNotScaleWithTheOthers(senderIsSafeObserver: Bool) {
        /// Drops 100 iterators of sequences filtered on one sender that has
        /// `others` more.
        func ending(among others: Int) -> Duration {
            let hub = NotificationHub()
            let sender: AnyObject = senderIsSafeObserver ? Store() : Plain()
            let sequence = hub.notifications(named: .scaled, from: sender)
            let kept = (0..<others).map { _ in sequence.makeAsyncIterator() }
            var batches = (0..<3).map { _ in (0..<100).map { _ in sequence.makeAsyncIterator() } }
            let duration = fastest(of: 3) { batches.removeLast() }
            withExtendedLifetime((kept, batches, sender, hub)) {}
            return duration
        }
        let early = ending(among: 64)
        let late = ending(among: 8_000)
        let ratio = late / early
        #expect(
            ratio < 4,
            "ending a sequence among 8,000 on its sender costs \(ratio)× what it costs among 64 (\(describe(early)) → \(describe(late)) per 100)"
        )
    }

    /// A hub's name table holds the names it has channels for, not every
    /// name the process ever made.
    @Test func aNewHubsMemory_doesNotGrowWithTheNamesEverCreatedInTheProcess() {
        let names = (0..<20_000).map { NotificationName<Int>("NotificationHubScalingTests.name.\($0)") }
        let hub = NotificationHub()
        let listener = Plain()
        hub.observe(names[names.count - 1], by: listener, isolation: nil) { _, _ in }
        let slots = hub._nameTableCapacity
        #expect(
            slots <= 64,
            "a new hub observing one name holds \(slots) name slots after 20,000 names were created"
        )
        withExtendedLifetime(listener) {}
    }
}
