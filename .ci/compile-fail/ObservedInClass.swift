// Must NOT compile: @Observed needs an enclosing SafeObservable instance.
// .ci/run type-checks this file and expects the message below.
// expected-error: requires that 'NotObservable' conform to 'SafeObservable'
import SafeObserve

final class NotObservable {
    @Observed var count = 0
}
