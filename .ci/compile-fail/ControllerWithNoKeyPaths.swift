// Must NOT compile: observing an object with an empty key-path list would
// observe nothing (KVOController rejected it at run time).
// .ci/run type-checks this file and expects the message below.
// expected-error: missing argument for parameter 'keyPaths'
import SafeObserve

final class Inbox: SafeObservable {
    @Observed var unread = 0
}

final class Badge {}

func watch(_ inbox: Inbox, for badge: Badge) {
    let controller = ObservationController(observer: badge)
    controller.observe(inbox) { _, _, _ in }
}
