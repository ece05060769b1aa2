// A bridged NotificationCenter that dies ends its SafeObserve relations and
// releases their handlers, as a hub that dies does.

import Foundation
import SafeObserve
import SafeObserveFoundation
import Synchronization
import Testing

extension Notification.Name {
    fileprivate static let dying = Notification.Name("FoundationBridgeLifetimeTests.dying")
}

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

private final class Listener: Sendable {}

@Suite("Foundation bridge lifetimes")
struct FoundationBridgeLifetimeTests {
    @Test func aCenterThatDies_endsItsRelations_andReleasesTheirHandlers() {
        let captures = Deaths()
        let listeners = (0..<100).map { _ in Listener() }
        weak var weakCenter: NotificationCenter?
        do {
            let center = NotificationCenter()
            weakCenter = center
            for listener in listeners {
                let capture = Capture(captures)
                center.safeObserve(.dying, by: listener, isolation: nil) { _, _ in _ = capture }
            }
            center.post(name: .dying, object: nil)
        }
        #expect(weakCenter == nil, "the test must drop the center's last reference")
        // Bounded: the relations may end on another thread, moments later.
        let deadline = ContinuousClock.now + .seconds(2)
        while captures.count < 100, ContinuousClock.now < deadline { usleep(1_000) }
        let live = listeners.reduce(0) { $0 + SafeObservation.relations(observedBy: $1).count }
        #expect(live == 0, "\(live) of 100 relations outlived their NotificationCenter")
        #expect(
            captures.count == 100, "\(captures.count) of 100 handlers (and captures) released after the center died")
        withExtendedLifetime(listeners) {}
    }
}
