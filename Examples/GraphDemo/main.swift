// GraphDemo — prints a Graphviz picture of live relations:
//
//   swift run GraphDemo | dot -Tsvg > relations.svg
//
// (Sources/SafeObserve/Documentation.docc/Resources/relations.svg is this
// program's output, rendered.)

import SafeObserve

final class Account: SafeObservable {
    @Observed var balance = 0
}

final class Inbox: SafeObservable {
    @Observed var unread = 0
    @Observed var account = Account()
}

final class BadgeViewModel: SafeObserver {
    let observerLifetime = ObserverLifetime()
    var text = ""
}

final class Logger {}

extension NotificationName where Payload == Int {
    static let unreadCountChanged = NotificationName("unreadCountChanged")
}

let inbox = Inbox()
let badge = BadgeViewModel()
let logger = Logger()
let hub = NotificationHub()

inbox.safeObserve(\.unread, by: badge, options: [.initial, .new]) { badge, _, change in
    badge.text = "\(change.newValue!)"
}
inbox.safeObserve(\.account.balance, by: badge) { _, _, _ in }
inbox.safeObserve(\.unread, by: logger, options: [.old, .new]) { _, _, _ in }
hub.observe(.unreadCountChanged, from: inbox, by: logger) { _, _ in }
hub.observe(.unreadCountChanged, by: badge) { _, _ in }

print(SafeObservation.graph(of: [inbox, badge, logger]), terminator: "")
