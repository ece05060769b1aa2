import Foundation
import SafeObserve
import SafeObserveFoundation
import Synchronization
import Testing

enum MigratingFromKVO {
    // example: MigratingFromKVO.md 2
    // SafeObserve
    final class Counter: SafeObservable {
        @Observed var count = 0
    }

    @Test("MigratingFromKVO.md: observe returns a KeyValueObservation that stops when released")
    static func blockBasedKVO() {
        var observation: KeyValueObservation?
        let counter = Counter()
        observation = counter.observe(\.count, options: [.new]) { counter, change in
            print(change.newValue!)
        }
        #expect(observation?.isActive == true)
        #expect(SafeObservation.relations(of: counter).count == 1)
        observation = nil  // stops observing
        // end example
        #expect(SafeObservation.relations(of: counter).isEmpty)
    }
}

enum MigratingFromKVOController {
    final class Inbox: SafeObservable {
        @Observed var unread = 0
    }

    // example: MigratingFromKVOController.md 1
    final class InboxBadge: ObservationControllerOwner {
        let observationControllerStorage = ObservationControllerStorage()
        var text = ""

        func watch(_ inbox: Inbox) {
            observationController.observe(inbox, keyPath: \.unread, options: [.initial, .new]) { badge, _, change in
                badge.text = "\(change.newValue!)"
            }
        }
    }
    // end example

    @Test("MigratingFromKVOController.md: an owner's controller")
    static func controller() {
        let inbox = Inbox()
        let badge = InboxBadge()
        badge.watch(inbox)
        #expect(badge.text == "0")
        inbox.unread = 3
        #expect(badge.text == "3")
    }
}

// example: MigratingFromNotificationCenter.md 1
@MainActor
final class Clock {
    var token: (any NSObjectProtocol)?
    var refreshes = 0

    func refresh() { refreshes += 1 }

    func start() {
        // Before: an observer token to keep, and to remove in deinit.
        token = NotificationCenter.default.addObserver(
            forName: .NSSystemTimeZoneDidChange, object: nil, queue: .main
        ) {
            [weak self] _ in MainActor.assumeIsolated { self?.refresh() }
        }

        // After: nothing to keep, nothing to remove.
        NotificationCenter.default.safeObserve(.NSSystemTimeZoneDidChange, by: self) { clock, _ in
            clock.refresh()
        }
    }
}
// end example

@Test("MigratingFromNotificationCenter.md: keep the posting side")
@MainActor
func migratingKeepThePostingSide() async {
    let clock = Clock()
    clock.start()
    // Posted off the main actor, as the system posts it. (Posted on the main
    // actor, swift-corelibs-foundation waits for OperationQueue.main, which
    // is not the current queue there, and never returns.)
    await Task.detached { NotificationCenter.default.post(name: .NSSystemTimeZoneDidChange, object: nil) }.value
    #expect(await eventually { clock.refreshes == 2 }, "both the Foundation block and the bridge's handler ran")
    if let token = clock.token { NotificationCenter.default.removeObserver(token) }
    NotificationCenter.default.safeUnobserve(.NSSystemTimeZoneDidChange, by: clock)
}

final class MigratedInbox {}

final class Recorded: Sendable {
    let value = Mutex<Int?>(nil)
}

// example: MigratingFromNotificationCenter.md 2
// Before
extension Notification.Name {
    static let inboxCountChanged = Notification.Name("inboxCountChanged")
}
func postBefore(_ inbox: MigratedInbox) {
    NotificationCenter.default.post(name: .inboxCountChanged, object: inbox, userInfo: ["count": 3])
}

// After
extension NotificationName where Payload == Int {
    static let inboxCountChanged = NotificationName("inboxCountChanged")
}
func postAfter(_ inbox: MigratedInbox) {
    NotificationHub.default.post(.inboxCountChanged, payload: 3, from: inbox)
}
// end example

@Test("MigratingFromNotificationCenter.md: move to the hub")
func migratingMoveToTheHub() {
    let inbox = MigratedInbox()
    let listener = Label()
    let hubToken = NotificationHub.default.observe(.inboxCountChanged, from: inbox, by: listener) {
        listener, notification in listener.text = "\(notification.payload)"
    }
    let userInfoCount = Recorded()
    let foundationToken = NotificationCenter.default.addObserver(
        forName: .inboxCountChanged, object: inbox, queue: nil
    ) { notification in
        let count = notification.userInfo?["count"] as? Int
        userInfoCount.value.withLock { $0 = count }
    }
    postBefore(inbox)
    #expect(userInfoCount.value.withLock { $0 } == 3)
    postAfter(inbox)
    #expect(listener.text == "3")
    NotificationCenter.default.removeObserver(foundationToken)
    hubToken.invalidate()
}
