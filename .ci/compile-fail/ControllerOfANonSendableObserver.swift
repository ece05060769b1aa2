// Each line marked `expected-error` must not compile, and every other line
// must: a controller of a non-`Sendable` observer is not `Sendable`, so it
// cannot carry its observer to another isolation (its callbacks and its
// `observer` property hand the observer out). These are region errors, which
// the compiler reports only for a file that otherwise type-checks, so they
// have a file of their own. Checked by .ci/compile-failures.
import SafeObserve

final class Note { var lines: [String] = [] }

final class SharedNote: Sendable {}

actor Elsewhere {
    func use(_ controller: ObservationController<Note>) {}
    func use(_ controller: ObservationController<SharedNote>) {}
}

@MainActor func aControllersObserver(_ note: Note, _ shared: SharedNote, _ elsewhere: Elsewhere) async {
    let controller = ObservationController(observer: note)
    await elsewhere.use(controller)  // expected-error
    Task.detached { controller.observer?.lines.append("x") }  // expected-error
    note.lines.append("y")
    let sharedController = ObservationController(observer: shared)
    await elsewhere.use(sharedController)
    Task.detached { _ = sharedController.observer }
}
