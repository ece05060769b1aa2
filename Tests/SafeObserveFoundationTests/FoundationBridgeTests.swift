import Foundation
import SafeObserve
import SafeObserveFoundation
import Synchronization
import Testing

extension Notification.Name {
    fileprivate static let ping = Notification.Name("SafeObserveFoundationTests.ping")
    fileprivate static let pong = Notification.Name("SafeObserveFoundationTests.pong")
}

/// Counts its instances' deinits.
private final class Lifetimes: Sendable {
    private let deinits = Atomic<Int>(0)
    var count: Int { deinits.load(ordering: .relaxed) }
    func died() { deinits.add(1, ordering: .relaxed) }
}

/// A listener recording what it receives.
// @unchecked Sendable: `storage` is only touched under `lock`.
private final class Listener: @unchecked Sendable {
    private let lock = NSLock()  // a pthread mutex, which the thread sanitizer sees
    private var storage: [String] = []
    let lifetimes: Lifetimes?
    init(lifetimes: Lifetimes? = nil) { self.lifetimes = lifetimes }
    deinit { lifetimes?.died() }
    var received: [String] { lock.withLock { storage } }
    func record(_ entry: String) { lock.withLock { storage.append(entry) } }
}

private final class Sender: Sendable {
    let lifetimes: Lifetimes?
    init(lifetimes: Lifetimes? = nil) { self.lifetimes = lifetimes }
    deinit { lifetimes?.died() }
}

/// Whether `condition` holds within five seconds (polled, on this thread).
private func settles(_ condition: () -> Bool) -> Bool {
    for _ in 0..<5_000 {
        if condition() { return true }
        usleep(1_000)
    }
    return condition()
}

/// Polls `condition` for up to four seconds.
private func eventually(isolation: isolated (any Actor)? = #isolation, _ condition: () -> Bool) async -> Bool {
    for _ in 0..<2_000 {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return condition()
}

@Suite("Foundation bridge")
struct FoundationBridgeTests {
    @Test func aNotificationPostedThroughTheCenterReachesTheListener_withItsUserInfo() {
        let center = NotificationCenter()
        let listener = Listener()
        center.safeObserve(.ping, by: listener, isolation: nil) { listener, notification in
            listener.record("\(notification.name.rawValue):\(notification.userInfo?["n"] as? Int ?? -1)")
        }
        center.post(name: .ping, object: nil, userInfo: ["n": 7])
        center.post(name: .pong, object: nil)
        #expect(listener.received == ["SafeObserveFoundationTests.ping:7"])
    }

    @Test func theObservationEndsWhenTheListenerDies_andNeverKeepsItAlive() {
        let center = NotificationCenter()
        let lifetimes = Lifetimes()
        let calls = Atomic<Int>(0)
        let handlerCaptures = Lifetimes()
        weak var weakListener: Listener?
        do {
            let listener = Listener(lifetimes: lifetimes)
            weakListener = listener
            let capture = Sender(lifetimes: handlerCaptures)
            center.safeObserve(.ping, by: listener, isolation: nil) { _, _ in
                withExtendedLifetime(capture) { _ = calls.add(1, ordering: .relaxed) }
            }
            center.post(name: .ping, object: nil)
        }
        #expect(weakListener == nil)
        #expect(lifetimes.count == 1)
        center.post(name: .ping, object: nil)
        #expect(calls.load(ordering: .relaxed) == 1)
        // A parallel test's sweep of dead plain listeners may end the relation
        // first and release the handler on its thread just after unlocking.
        #expect(
            settles { handlerCaptures.count == 1 }, "the handler and its captures are released once the listener died")
    }

    @Test func theSenderFilterMatchesOnlyItsSender_neverKeepsItAlive_andMatchesNothingAfterItDied() {
        let center = NotificationCenter()
        let listener = Listener()
        let senderLifetimes = Lifetimes()
        var sender: Sender? = Sender(lifetimes: senderLifetimes)
        center.safeObserve(.ping, object: sender, by: listener, isolation: nil) { listener, notification in
            listener.record(notification.object == nil ? "none" : "sender")
        }
        center.post(name: .ping, object: sender)
        center.post(name: .ping, object: Sender())
        center.post(name: .ping, object: nil)
        #expect(listener.received == ["sender"])
        sender = nil
        #expect(senderLifetimes.count == 1, "the filter does not keep its sender alive")
        // Objects allocated after the sender died (one of them may reuse its
        // address) are not taken for it.
        for _ in 0..<100 { center.post(name: .ping, object: Sender()) }
        center.post(name: .ping, object: nil)
        #expect(listener.received == ["sender"])
    }

    @Test func aValuePostedAsObjectReachesUnfilteredObservers() {
        let center = NotificationCenter()
        let listener = Listener()
        center.safeObserve(.ping, by: listener, isolation: nil) { listener, notification in
            listener.record("\(notification.object as? Int ?? -1)")
        }
        center.post(name: .ping, object: 42)
        #expect(listener.received == ["42"])
    }

    @Test func invalidateAndUnobserve_areIdempotent() {
        let center = NotificationCenter()
        let listener = Listener()
        let token = center.safeObserve(.ping, by: listener, isolation: nil) { listener, _ in listener.record("ping") }
        center.safeObserve(.pong, by: listener, isolation: nil) { listener, _ in listener.record("pong") }
        center.post(name: .ping, object: nil)
        token.invalidate()
        token.invalidate()
        center.post(name: .ping, object: nil)
        center.post(name: .pong, object: nil)
        center.safeUnobserve(.pong, by: listener)
        center.safeUnobserve(.pong, by: listener)
        center.post(name: .pong, object: nil)
        #expect(listener.received == ["ping", "pong"])
        #expect(SafeObservation.relations(observedBy: listener).isEmpty)
    }

    @Test func unobserveByListener_endsEverythingItObservedOnThatCenterOnly() {
        let center = NotificationCenter()
        let otherCenter = NotificationCenter()
        let listener = Listener()
        center.safeObserve(.ping, by: listener, isolation: nil) { listener, _ in listener.record("ping") }
        center.safeObserve(.pong, by: listener, isolation: nil) { listener, _ in listener.record("pong") }
        otherCenter.safeObserve(.ping, by: listener, isolation: nil) { listener, _ in listener.record("other") }
        #expect(SafeObservation.relations(observedBy: listener).count == 3)
        center.safeUnobserve(by: listener)
        center.post(name: .ping, object: nil)
        center.post(name: .pong, object: nil)
        otherCenter.post(name: .ping, object: nil)
        #expect(listener.received == ["other"])
    }

    @Test func centersAreKeptApart() {
        let first = NotificationCenter()
        let second = NotificationCenter()
        let listener = Listener()
        first.safeObserve(.ping, by: listener, isolation: nil) { listener, _ in listener.record("first") }
        second.post(name: .ping, object: nil)
        NotificationCenter.default.post(name: .ping, object: nil)
        #expect(listener.received.isEmpty)
    }

    @Test func observingTwice_keepsTheFirstHandler() {
        let center = NotificationCenter()
        let listener = Listener()
        let first = center.safeObserve(.ping, by: listener, isolation: nil) { listener, _ in listener.record("first") }
        let second = center.safeObserve(.ping, by: listener, isolation: nil) { listener, _ in listener.record("second")
        }
        center.post(name: .ping, object: nil)
        #expect(listener.received == ["first"])
        #expect(first == second)
    }

    @Test func aHandlerMayUnobserveAndPost() {
        let center = NotificationCenter()
        let listener = Listener()
        center.safeObserve(.ping, by: listener, isolation: nil) { listener, _ in
            listener.record("ping")
            center.safeUnobserve(.ping, by: listener)
            center.post(name: .pong, object: nil)
        }
        center.safeObserve(.pong, by: listener, isolation: nil) { listener, _ in listener.record("pong") }
        center.post(name: .ping, object: nil)
        center.post(name: .ping, object: nil)
        #expect(listener.received == ["ping", "pong"])
    }

    @MainActor
    @Test func aHandlerRegisteredFromTheMainActor_runsOnIt_forAPostMadeElsewhere() async {
        final class Model {
            var names: [String] = []
        }
        let center = NotificationCenter()
        let model = Model()  // not Sendable: main-actor state
        center.safeObserve(.ping, by: model) { model, notification in
            // The runtime's check (under Swift Testing on Linux, main-actor
            // jobs run on the thread standing in for the parked main thread).
            MainActor.preconditionIsolated()
            model.names.append("\(notification.userInfo?["n"] as? Int ?? -1)")
        }
        await Task.detached {
            for n in 0..<5 { center.post(name: .ping, object: nil, userInfo: ["n": n]) }
        }.value
        #expect(await eventually { model.names.count == 5 })
        #expect(model.names == ["0", "1", "2", "3", "4"])
    }

    @Test func manyShortLivedListeners_leaveNoRelationBehind() {
        let center = NotificationCenter()
        let lifetimes = Lifetimes()
        let probe = Listener()
        center.safeObserve(.ping, by: probe, isolation: nil) { listener, _ in listener.record("probe") }
        for _ in 0..<10_000 {
            let listener = Listener(lifetimes: lifetimes)
            center.safeObserve(.ping, by: listener, isolation: nil) { listener, _ in listener.record("x") }
        }
        #expect(lifetimes.count == 10_000)
        center.post(name: .ping, object: nil)
        #expect(probe.received == ["probe"])
    }

    @Test func postsFromManyThreadsWhileListenersComeAndGo() async {
        let center = NotificationCenter()
        let delivered = Atomic<Int>(0)
        let stable = Listener()
        center.safeObserve(.ping, by: stable, isolation: nil) { _, _ in delivered.add(1, ordering: .relaxed) }
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<2 {
                group.addTask { for _ in 0..<2_000 { center.post(name: .ping, object: nil) } }
            }
            group.addTask {
                for _ in 0..<2_000 {
                    let listener = Listener()
                    center.safeObserve(.ping, by: listener, isolation: nil) { _, _ in }
                }
            }
        }
        #expect(delivered.load(ordering: .relaxed) == 4_000)
    }
}
