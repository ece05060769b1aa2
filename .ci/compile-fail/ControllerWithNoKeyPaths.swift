// Must NOT compile: observing an object with an empty key-path list would
// observe nothing (KVOController rejected it at run time).
// .ci/compile-failures checks that the marked line, and no other, fails.
import SafeObserve

final class Inbox: SafeObservable {
    @Observed var unread = 0
}

final class Badge {}

func watch(_ inbox: Inbox, for badge: Badge) {
    let controller = ObservationController(observer: badge)
    controller.observe(inbox) { _, _, _ in }  // expected-error: no exact matches in call to instance method 'observe'
}
