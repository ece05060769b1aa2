// NotificationsDemo — a notification center whose observers remove
// themselves: typed names, sender filters that never outlive the sender,
// observers of every name, subscriptions that end when released, and a
// queue that merges a burst into one notification.
//
//   swift run NotificationsDemo

import SafeObserve

extension NotificationName where Payload == Int {
    static let unreadCountChanged = NotificationName("unreadCountChanged")
}

extension NotificationName where Payload == Void {
    static let didLogOut = NotificationName("didLogOut")
}

final class Inbox {
    let title: String
    init(_ title: String) { self.title = title }
}

final class Badge {
    let label: String
    var count = 0
    init(_ label: String) { self.label = label }
    deinit { print("   (\(label) badge deinit: nothing to remove)") }
}

final class Logger {
    var lines: [String] = []
}

func demo() {
    let hub = NotificationHub()

    print("1. Typed names: the payload type is checked at compile time")
    var badge: Badge? = Badge("all")
    hub.observe(.unreadCountChanged, by: badge!) { badge, notification in
        badge.count = notification.payload
    }
    hub.post(.unreadCountChanged, payload: 3)
    print("   the badge shows \(badge!.count)")

    print("2. The listener dies: its observation ends by itself")
    badge = nil
    hub.post(.unreadCountChanged, payload: 4)  // no one left, no crash, no leak

    print("3. A sender filter never outlives its sender")
    var work: Inbox? = Inbox("work")
    let workBadge = Badge("work")
    hub.observe(.unreadCountChanged, from: work!, by: workBadge) { badge, notification in
        badge.count = notification.payload
    }
    hub.post(.unreadCountChanged, payload: 7, from: work!)
    hub.post(.unreadCountChanged, payload: 99, from: Inbox("personal"))
    print("   work badge: \(workBadge.count) (the personal inbox's post did not match)")
    work = nil
    hub.post(.unreadCountChanged, payload: 100)
    hub.post(.unreadCountChanged, payload: 101, from: Inbox("new"))
    print("   after the work inbox died: \(workBadge.count) (its filter matches nothing)")

    print("4. Observers of every name")
    let logger = Logger()
    hub.observeEvery(by: logger) { logger, notification in
        logger.lines.append("\(notification.name): \(notification.payload)")
    }
    hub.post(.unreadCountChanged, payload: 1)
    hub.post(.didLogOut)
    print("   the logger saw \(logger.lines)")

    print("5. A subscription lives as long as you keep it")
    var subscription: NotificationSubscription? = hub.subscribe(.didLogOut) { _ in
        print("   logged out")
    }
    hub.post(.didLogOut)
    subscription = nil
    hub.post(.didLogOut)  // the released subscription's handler does not run
    print("   relations left for the logger: \(SafeObservation.relations(observedBy: logger).count)")
    _ = subscription
}

@MainActor
func queueDemo() async {
    print("6. A queue merges a burst into one notification, posted after this job")
    let hub = NotificationHub()
    let queue = NotificationHub.Queue(hub: hub)  // posts from the main actor
    let badge = Badge("queued")
    hub.observe(.unreadCountChanged, by: badge) { badge, notification in
        badge.count = notification.payload
        print("   posted once, with the latest count: \(notification.payload)")
    }
    let inbox = Inbox("batch")
    for count in 1...5 { queue.enqueue(.unreadCountChanged, payload: count, from: inbox, postingStyle: .asap) }
    print("   enqueued 5 notifications; posted so far: \(badge.count)")
    await Task { @MainActor in }.value  // the queue's job runs first
}

demo()
await queueDemo()
