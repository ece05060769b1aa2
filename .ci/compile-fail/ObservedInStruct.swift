// Must NOT compile: @Observed needs an enclosing SafeObservable instance.
// .ci/compile-failures checks that the marked line, and no other, fails.
import SafeObserve

struct Settings {
    @Observed var volume = 1  // expected-error: @Observed can only be applied to properties
}
