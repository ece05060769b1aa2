// Ending a listener's relations on a hub, as Foundation's removeObserver
// forms do, and listing them.

import Synchronization
import Testing

@testable import SafeObserve

extension NotificationName where Payload == Int {
    fileprivate static let first = NotificationName("NotificationHubRemovalTests.first")
    fileprivate static let second = NotificationName("NotificationHubRemovalTests.second")
}

/// A plain class (not a `SafeObserver`): a sender or a listener.
private final class Plain: Sendable {}

/// Counts deinits.
private final class Deaths: Sendable {
    private let deinits = Atomic<Int>(0)
    var count: Int { deinits.load(ordering: .relaxed) }
    func died() { deinits.add(1, ordering: .relaxed) }
}

/// What a handler captures, to tell when the handler is released.
private final class Capture: Sendable {
    let deaths: Deaths
    init(_ deaths: Deaths) { self.deaths = deaths }
    deinit { deaths.died() }
}

/// What handlers received, in order.
private final class Received: Sendable {
    private let storage = Mutex<[String]>([])
    var entries: [String] { storage.withLock { $0 } }
    func append(_ entry: String) { storage.withLock { $0.append(entry) } }
}

@Suite("NotificationHub removal")
struct NotificationHubRemovalTests {
    /// Foundation: `removeObserver(listener, name: n, object: nil)` removes
    /// the listener's observers of `n` whatever their object.
    @Test func unobservingANameWithoutASender_endsTheListenersSenderFilteredRelationsOfThatNameToo() {
        let hub = NotificationHub()
        let listener = Plain()
        let sender = Plain()
        let received = Received()
        hub.observe(.first, by: listener, isolation: nil) { _, n in received.append("any \(n.payload)") }
        hub.observe(.first, from: sender, by: listener, isolation: nil) { _, n in
            received.append("from sender \(n.payload)")
        }
        hub.observe(.second, from: sender, by: listener, isolation: nil) { _, n in
            received.append("second \(n.payload)")
        }
        hub.unobserve(.first, by: listener)
        hub.post(.first, payload: 1, from: sender)
        hub.post(.second, payload: 2, from: sender)
        #expect(received.entries == ["second 2"], "only the other name's relation may survive")
        #expect(SafeObservation.relations(observedBy: listener).count == 1)
        withExtendedLifetime((listener, sender)) {}
    }

    /// Foundation: `removeObserver(listener, name: nil, object: sender)`
    /// removes the listener's observers with that object, whatever their
    /// name (observers of every name included).
    @Test func unobservingFromASender_endsTheListenersRelationsFilteredOnIt_ofEveryName() {
        let hub = NotificationHub()
        let listener = Plain()
        let other = Plain()
        let a = Plain()
        let b = Plain()
        let received = Received()
        hub.observe(.first, by: listener, isolation: nil) { _, n in received.append("first \(n.payload)") }
        hub.observe(.first, from: a, by: listener, isolation: nil) { _, n in received.append("first/a \(n.payload)") }
        hub.observe(.second, from: a, by: listener, isolation: nil) { _, n in received.append("second/a \(n.payload)") }
        hub.observeEvery(from: a, by: listener, isolation: nil) { _, n in received.append("every/a \(n.name)") }
        hub.observe(.first, from: b, by: listener, isolation: nil) { _, n in received.append("first/b \(n.payload)") }
        hub.observe(.first, from: a, by: other, isolation: nil) { _, n in received.append("other/a \(n.payload)") }
        hub.unobserve(from: a, by: listener)
        hub.unobserve(from: a, by: listener)  // idempotent
        hub.post(.first, payload: 1, from: a)
        hub.post(.second, payload: 2, from: a)
        hub.post(.first, payload: 3, from: b)
        #expect(received.entries == ["first 1", "other/a 1", "first 3", "first/b 3"])
        #expect(hub.relations(observedBy: listener).count == 2)
        withExtendedLifetime((listener, other, a, b)) {}
    }

    /// A hub's removals end its own relations only — not even another
    /// hub's relations filtered on it as a sender.
    @Test func aHubsRemovals_leaveTheListenersRelationsOnOtherHubs() {
        let hub = NotificationHub()
        let otherHub = NotificationHub()
        let listener = Plain()
        let received = Received()
        hub.observe(.first, by: listener, isolation: nil) { _, n in received.append("hub \(n.payload)") }
        otherHub.observe(.first, by: listener, isolation: nil) { _, n in received.append("other \(n.payload)") }
        otherHub.observe(.first, from: hub, by: listener, isolation: nil) { _, n in
            received.append("other/hub \(n.payload)")
        }
        hub.unobserve(.first, by: listener)
        hub.unobserve(from: hub, by: listener)
        hub.unobserve(by: listener)
        hub.post(.first, payload: 1)
        otherHub.post(.first, payload: 2, from: hub)
        #expect(received.entries == ["other 2", "other/hub 2"])
        #expect(hub.relations(observedBy: listener).isEmpty)
        #expect(otherHub.relations(observedBy: listener).count == 2)
        withExtendedLifetime(listener) {}
    }

    /// Foundation: `addObserver(forName: nil, object:queue:using:)`.
    @Test func aSubscriptionToEveryName_receivesEveryPost_untilCancelledOrReleased() {
        let hub = NotificationHub()
        let sender = Plain()
        let received = Received()
        let deaths = Deaths()
        var all: NotificationSubscription? = hub.subscribeEvery(isolation: nil) { [capture = Capture(deaths)] n in
            withExtendedLifetime(capture) { received.append("all \(n.name) \(n.payload)") }
        }
        let fromSender = hub.subscribeEvery(from: sender, isolation: nil) { n in
            received.append("sender \(n.name) \(n.payload)")
        }
        hub.post(.first, payload: 1)
        hub.post(.second, payload: 2, from: sender)
        #expect(
            received.entries == [
                "all NotificationHubRemovalTests.first 1", "all NotificationHubRemovalTests.second 2",
                "sender NotificationHubRemovalTests.second 2",
            ])
        #expect(all?.isActive == true)
        #expect(hub.relations().count == 2)
        all = nil
        #expect(deaths.count == 1, "a released subscription keeps its handler")
        fromSender.cancel()
        #expect(!fromSender.isActive)
        hub.post(.first, payload: 3, from: sender)
        #expect(received.entries.count == 3)
        #expect(hub.relations().isEmpty)
    }

    /// Per-hub introspection: the hub's live relations, in registration
    /// order, without those of other hubs or of dead listeners and senders.
    @Test func aHubListsItsLiveRelations_inRegistrationOrder() {
        let hub = NotificationHub()
        let otherHub = NotificationHub()
        let listener = Plain()
        let other = Plain()
        let sender = Plain()
        let first = hub.observe(.first, by: listener, isolation: nil) { _, _ in }
        let second = hub.observe(.second, by: other, isolation: nil) { _, _ in }
        let third = hub.observe(.first, from: sender, by: listener, isolation: nil) { _, _ in }
        let fourth = hub.observeEvery(by: other, isolation: nil) { _, _ in }
        otherHub.observe(.first, by: listener, isolation: nil) { _, _ in }
        #expect(hub.relations() == [first, second, third, fourth])
        #expect(hub.relations(observedBy: listener) == [first, third])
        #expect(hub.relations(observedBy: other) == [second, fourth])
        #expect(hub.relations(observedBy: sender).isEmpty)
        #expect(otherHub.relations().count == 1)
        do {
            // A dead sender's relation, and a dead plain listener's, are
            // ended when found: the counts are of relations that can deliver.
            var dyingSender: Plain? = Plain()
            var dyingListener: Plain? = Plain()
            let ofDeadSender = hub.observe(.first, from: dyingSender!, by: listener, isolation: nil) { _, _ in }
            let ofDeadListener = hub.observe(.first, by: dyingListener!, isolation: nil) { _, _ in }
            #expect(hub.relations().count == 6)
            dyingSender = nil
            dyingListener = nil
            #expect(hub.relations() == [first, second, third, fourth])
            #expect(!ofDeadSender.isActive)
            #expect(!ofDeadListener.isActive)
        }
        withExtendedLifetime((listener, other, sender)) {}
    }
}
