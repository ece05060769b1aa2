// ControllerDemo — KVOController's observer-owned controller, in Swift.
//
//   swift run ControllerDemo

import SafeObserve

final class Inbox: SafeObservable {
    @Observed var unread = 0
    @Observed var subject = ""
    deinit { print("  inbox deinitialized") }
}

/// An observer with its own lazily created controller (one stored property).
final class InboxBadge: ObservationControllerOwner, ObservationControllerDelegate {
    let observationControllerStorage = ObservationControllerStorage()

    func watch(_ inbox: Inbox, archive: Inbox) {
        // 1. A closure: it receives the badge and the inbox, so it captures neither.
        observationController.observe(inbox, keyPath: \.unread, options: [.initial, .old, .new]) { _, _, change in
            print("  closure: unread \(change.oldValue.map(String.init) ?? "-") → \(change.newValue!)")
        }
        // 2. An unbound method, like KVOController's action: selector (no retain).
        observationController.observe(inbox, keyPath: \.subject, action: InboxBadge.subjectChanged)
        // 3. No callback: the delegate method, told which key path changed.
        observationController.observe(archive, keyPaths: \.unread, \.subject)
    }

    func subjectChanged(_ change: ObservedChange<String>) {
        print("  action: subject is now \"\(change.newValue!)\"")
    }

    func observationController<Object: AnyObject>(didObserve change: ObservedKeyPathChange<Object>, of object: Object) {
        print("  delegate: archive \(change.keyPath == \Inbox.unread ? "unread" : "subject") changed")
    }

    deinit { print("  badge deinitialized; its controller ended every relation") }
}

print("Observe through the badge's controller")
var badge: InboxBadge? = InboxBadge()
var inbox: Inbox? = Inbox()
var archive: Inbox? = Inbox()
badge!.watch(inbox!, archive: archive!)
badge!.watch(inbox!, archive: archive!)  // the same relations again: deduplicated, nothing changes
inbox!.unread = 3
inbox!.subject = "Lunch?"
archive!.unread = 1
print(badge!.observationController.debugDescription)

print("Release both inboxes: the controller retains them (retainsObserved: true, as KVOController)")
inbox = nil
archive = nil
print("Release the badge: its controller dies with it and lets go of the inboxes")
badge = nil
