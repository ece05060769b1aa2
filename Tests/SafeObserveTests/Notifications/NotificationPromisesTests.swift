import Testing

@testable import SafeObserve

extension NotificationName where Payload == Int {
    fileprivate static let promised = NotificationName("promises.promised")
}

/// A sender that posts from inside its own `deinit`.
private final class DyingSender {
    let hub: NotificationHub
    init(hub: NotificationHub) { self.hub = hub }
    deinit { hub.post(.promised, payload: -1, from: self) }
}

/// Promises of the Notifications article that no other test pinned.
@Suite("Notification promises")
struct NotificationPromisesTests {
    /// Notifications.md, "Delivery": "the name's observers, the observers of
    /// the name from that sender, then the observers of every name", each in
    /// registration order — whatever order the three were registered in.
    @Test func aPost_reachesTheNamesObservers_thenTheSendersOnes_thenEveryNameOnes() {
        let hub = NotificationHub()
        let sender = Peer()
        let log = EventLog()
        let listeners = (0..<6).map { _ in Listener() }
        hub.observeEvery(by: listeners[0]) { _, _ in log.record("every 1") }
        hub.observe(.promised, from: sender, by: listeners[1]) { _, _ in log.record("sender 1") }
        hub.observe(.promised, by: listeners[2]) { _, _ in log.record("name 1") }
        hub.observeEvery(by: listeners[3]) { _, _ in log.record("every 2") }
        hub.observe(.promised, from: sender, by: listeners[4]) { _, _ in log.record("sender 2") }
        hub.observe(.promised, by: listeners[5]) { _, _ in log.record("name 2") }
        hub.post(.promised, payload: 1, from: sender)
        #expect(log.entries == ["name 1", "name 2", "sender 1", "sender 2", "every 1", "every 2"])
        withExtendedLifetime((listeners, sender)) {}
    }

    /// Notifications.md: "A notification posted from inside its sender's own
    /// `deinit` is not delivered".
    @Test func aPostFromInsideTheSendersDeinit_isNotDelivered() {
        let hub = NotificationHub()
        let listener = Listener()
        let log = EventLog()
        hub.observe(.promised, by: listener) { _, notification in log.record("\(notification.payload)") }
        hub.observeEvery(by: listener) { _, notification in log.record("every \(notification.name)") }
        do {
            let sender = DyingSender(hub: hub)
            hub.post(.promised, payload: 1, from: sender)
        }
        #expect(log.entries == ["1", "every promises.promised"])
        withExtendedLifetime(listener) {}
    }
}
