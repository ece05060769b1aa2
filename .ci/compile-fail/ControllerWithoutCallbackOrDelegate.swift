// Must NOT compile: observing without a handler or an action delivers to the
// observer's ObservationControllerDelegate method, so the observer must adopt it.
// .ci/compile-failures checks that the marked line, and no other, fails.
import SafeObserve

final class Inbox: SafeObservable {
    @Observed var unread = 0
}

final class Badge {}

func watch(_ inbox: Inbox, for badge: Badge) {
    let controller = ObservationController(observer: badge)
    controller.observe(inbox, keyPath: \.unread)  // expected-error: conform to 'ObservationControllerDelegate'
}
