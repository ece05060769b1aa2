import SafeObserve
import Testing

// example: Notifications.md 1
extension NotificationName where Payload == Int {
    static let unreadCountChanged = NotificationName("unreadCountChanged")
}

final class Badge {
    var count = 0
}

// The tests that use the default hub run one at a time.
@Suite("Notifications.md", .serialized)
struct NotificationsArticle {
    @Test("Notifications.md: observe and post")
    func overview() {
        let badge = Badge()
        NotificationHub.default.observe(.unreadCountChanged, by: badge) { badge, notification in
            badge.count = notification.payload
        }
        NotificationHub.default.post(.unreadCountChanged, payload: 3)  // badge.count == 3
        // end example
        #expect(badge.count == 3)
        NotificationHub.default.unobserve(by: badge)
    }

    @Test("Notifications.md: a dead plain badge’s observation ends by the time the next post reaches it")
    func badgeDeath() {
        let hub = NotificationHub()
        let captured = Badge()
        weak let weakCaptured = captured
        var token: ObservationToken?
        do {
            let badge = Badge()
            token = hub.observe(.unreadCountChanged, by: badge) { [captured] badge, _ in badge.count = captured.count }
        }
        _ = consume captured
        hub.post(.unreadCountChanged, payload: 1)
        #expect(token?.isActive == false)
        #expect(weakCaptured == nil, "the handler's captures are released")
    }

    final class Inbox {
        var unread = 0
        func add(_ message: String) { unread += 1 }
    }

    @Test("Notifications.md: filtering by sender")
    func filteringBySender() {
        let hub = NotificationHub()
        let badge = Badge()
        let workInbox = Inbox()
        let otherInbox = Inbox()
        // example: Notifications.md 2
        hub.observe(.unreadCountChanged, from: workInbox, by: badge) { badge, notification in
            badge.count = notification.payload
        }
        hub.post(.unreadCountChanged, payload: 5, from: workInbox)
        // end example
        #expect(badge.count == 5)
        hub.post(.unreadCountChanged, payload: 6, from: otherInbox)
        #expect(badge.count == 5)
    }

    final class Logger {
        var lines: [String] = []
        func log(_ line: String) { lines.append(line) }
    }

    @Test("Notifications.md: observers of every name")
    func observersOfEveryName() {
        let hub = NotificationHub()
        let logger = Logger()
        // example: Notifications.md 3
        hub.observeEvery(by: logger) { logger, notification in
            logger.log("\(notification.name): \(notification.payload)")
        }
        // end example
        hub.post(.unreadCountChanged, payload: 2)
        #expect(logger.lines == ["unreadCountChanged: 2"])
    }

    @Test("Notifications.md: a subscription dies with its Screen, and its handler is released")
    func subscriptionDiesWithItsOwner() {
        let hub = NotificationHub()
        weak var weakSubscription: NotificationSubscription?
        do {
            let screen = Screen()
            screen.start(hub)
            weakSubscription = screen.subscription
            hub.post(.unreadCountChanged, payload: 1)
        }
        #expect(weakSubscription == nil)
    }

    @Test("Notifications.md: awaiting notifications; cancelling the task ends the observation")
    @MainActor
    func awaitingNotifications() async {
        let hub = NotificationHub()
        let badge = Badge()
        let loop = Task { await Self.follow(hub, badge) }
        var posted = 0
        let received = await eventually {
            posted += 1
            hub.post(.unreadCountChanged, payload: posted)
            return badge.count > 0
        }
        #expect(received)
        loop.cancel()
        #expect(await finishes(loop))
    }

    @MainActor
    static func follow(_ hub: NotificationHub, _ badge: Badge) async {
        // example: Notifications.md 5
        for await notification in hub.notifications(named: .unreadCountChanged) {
            badge.count = notification.payload
        }
        // end example
    }

    @Test("Notifications.md: the queue posts one notification after the job, carrying the last count")
    @MainActor
    func queue() async {
        let inbox = Inbox()
        let badge = Badge()
        let batch = ["a", "b", "c"]
        var posts: [Int] = []
        let token = NotificationHub.default.observe(.unreadCountChanged, from: inbox, by: badge) { _, notification in
            posts.append(notification.payload)
        }
        // example: Notifications.md 6
        let queue = NotificationHub.Queue.main  // the default hub, the main actor
        for message in batch {
            inbox.add(message)
            // One notification after this job, carrying the last count.
            queue.enqueue(.unreadCountChanged, payload: inbox.unread, from: inbox, postingStyle: .asap)
        }
        // end example
        #expect(posts.isEmpty, "nothing is posted before this job ends")
        #expect(await eventually { !posts.isEmpty })
        #expect(posts == [3])
        token.invalidate()
    }

    @Test("Notifications.md: removing observers")
    func removingObservers() {
        let hub = NotificationHub()
        let badge = Badge()
        let workInbox = Inbox()
        let token = hub.observe(.unreadCountChanged, by: badge) { badge, _ in badge.count += 1 }
        hub.observe(.unreadCountChanged, from: workInbox, by: badge) { badge, _ in badge.count += 1 }
        // example: Notifications.md 7
        token.invalidate()  // one observation
        hub.unobserve(.unreadCountChanged, from: workInbox, by: badge)  // a name from a sender
        hub.unobserve(.unreadCountChanged, by: badge)  // a name, whatever the sender
        hub.unobserve(from: workInbox, by: badge)  // a sender, whatever the name
        hub.unobserve(by: badge)  // everything badge observes on this hub
        SafeObservation.removeAll(observedBy: badge)  // and everything else it observes
        // end example
        hub.post(.unreadCountChanged, payload: 1, from: workInbox)
        #expect(badge.count == 0)
        #expect(SafeObservation.relations(observedBy: badge).isEmpty)
    }
}

// example: Notifications.md 4
final class Screen {
    var subscription: NotificationSubscription?

    func start(_ hub: NotificationHub) {
        subscription = hub.subscribe(.unreadCountChanged) { notification in
            print("unread:", notification.payload)
        }
    }
}  // the Screen dies → its subscription dies → the handler is released
// end example
