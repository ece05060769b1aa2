// Must NOT compile: @Observed needs an enclosing SafeObservable instance.
// .ci/run type-checks this file and expects the message below.
// expected-error: @Observed can only be applied to properties of classes that conform to SafeObservable
import SafeObserve

struct Settings {
    @Observed var volume = 1
}
