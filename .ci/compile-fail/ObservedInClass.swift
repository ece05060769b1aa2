// Must NOT compile: @Observed needs an enclosing SafeObservable instance.
// The error has no source location (it is found when the property's
// accessors are made), so .ci/compile-failures looks for its message.
// expected-error: requires that 'NotObservable' conform to 'SafeObservable'
import SafeObserve

final class NotObservable {
    @Observed var count = 0
}
