// Ending a listener's observations on a bridged center by object, and
// listing a center's observations, as Foundation's removeObserver forms do.

import Foundation
import SafeObserve
import SafeObserveFoundation
import Synchronization
import Testing

extension Notification.Name {
    fileprivate static let opened = Notification.Name("FoundationBridgeRemovalTests.opened")
    fileprivate static let closed = Notification.Name("FoundationBridgeRemovalTests.closed")
}

private final class Plain: Sendable {}

/// What handlers received, in order.
private final class Received: Sendable {
    private let storage = Mutex<[String]>([])
    var entries: [String] { storage.withLock { $0 } }
    func append(_ entry: String) { storage.withLock { $0.append(entry) } }
}

@Suite("Foundation bridge removal")
struct FoundationBridgeRemovalTests {
    /// `removeObserver(listener, name: nil, object: document)`.
    @Test func unobservingAnObject_endsTheListenersObservationsWithIt_ofEveryName() {
        let center = NotificationCenter()
        let editor = Plain()
        let document = Plain()
        let other = Plain()
        let received = Received()
        center.safeObserve(.opened, object: document, by: editor, isolation: nil) { _, _ in received.append("opened") }
        center.safeObserve(.closed, object: document, by: editor, isolation: nil) { _, _ in received.append("closed") }
        center.safeObserve(.opened, object: other, by: editor, isolation: nil) { _, _ in received.append("other") }
        center.safeObserve(.opened, by: editor, isolation: nil) { _, _ in received.append("any") }
        #expect(center.safeRelations(observedBy: editor).count == 4)
        center.safeUnobserve(object: document, by: editor)
        center.post(name: .opened, object: document)
        center.post(name: .closed, object: document)
        center.post(name: .opened, object: other)
        #expect(received.entries == ["any", "any", "other"])
        #expect(center.safeRelations(observedBy: editor).count == 2)
        withExtendedLifetime((editor, document, other)) {}
    }

    /// `removeObserver(listener, name: n, object: nil)` removes the
    /// listener's observers of `n` whatever their object.
    @Test func unobservingANameWithoutAnObject_endsItsObservationsWithAnObjectToo() {
        let center = NotificationCenter()
        let editor = Plain()
        let document = Plain()
        let received = Received()
        center.safeObserve(.opened, object: document, by: editor, isolation: nil) { _, _ in received.append("opened") }
        center.safeObserve(.opened, by: editor, isolation: nil) { _, _ in received.append("any") }
        center.safeObserve(.closed, object: document, by: editor, isolation: nil) { _, _ in received.append("closed") }
        center.safeUnobserve(.opened, by: editor)
        center.post(name: .opened, object: document)
        center.post(name: .closed, object: document)
        #expect(received.entries == ["closed"])
        withExtendedLifetime((editor, document)) {}
    }

    /// A center lists its own live observations, in registration order.
    @Test func aCenterListsItsLiveObservations_inRegistrationOrder() {
        let center = NotificationCenter()
        let otherCenter = NotificationCenter()
        let editor = Plain()
        let viewer = Plain()
        #expect(center.safeRelations().isEmpty)
        let first = center.safeObserve(.opened, by: editor, isolation: nil) { _, _ in }
        let second = center.safeObserve(.closed, by: viewer, isolation: nil) { _, _ in }
        let third = center.safeObserve(.closed, by: editor, isolation: nil) { _, _ in }
        otherCenter.safeObserve(.opened, by: editor, isolation: nil) { _, _ in }
        #expect(center.safeRelations() == [first, second, third])
        #expect(center.safeRelations(observedBy: editor) == [first, third])
        #expect(otherCenter.safeRelations().count == 1)
        center.safeUnobserve(by: editor)
        #expect(center.safeRelations() == [second])
        withExtendedLifetime((editor, viewer)) {}
    }
}
