// Scaffolding the documents' examples take for granted, and bounded waits.
//
// Each example is pasted between `// example: <document> <n>` and
// `// end example` (the n-th ```swift block of the document), with only the
// scaffolding its prose implies around or between its lines; `.ci/doc-examples`
// checks that every line of every block is there, in order.

import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The `label` of the examples: a plain class (not `SafeObserver`) with the
/// text a handler sets, and every text it was given, for assertions.
final class Label {
    var text = "" {
        didSet { history.append(text) }
    }
    private(set) var history: [String] = []
}

/// Waits (polling, with a deadline) until `condition` holds, and returns it;
/// the condition is evaluated in the caller's isolation.
///
/// Gives up only after `seconds` *and* 2,000 polls, as the suite's own
/// `eventually` does: each poll waits for the caller's actor, and in a full
/// run (more so under a sanitizer) the synchronous tests keep the two
/// cooperative threads busy for minutes, during which no poll happens. After
/// 30 minutes it gives up whatever happened, so it never hangs.
func eventually(
    within seconds: Double = 5, isolation: isolated (any Actor)? = #isolation, _ condition: () -> Bool
) async -> Bool {
    let clock = ContinuousClock()
    let start = clock.now
    var polls = 0
    while !condition() {
        let elapsed = clock.now - start
        if elapsed > .seconds(1_800) || (polls >= 2_000 && elapsed > .milliseconds(Int(seconds * 1_000))) {
            return false
        }
        polls += 1
        try? await Task.sleep(for: .milliseconds(2))
    }
    return true
}

/// Whether `task` finishes within `seconds` (never waits longer).
func finishes<Success: Sendable>(
    _ task: Task<Success, Never>, within seconds: Double = 5, isolation: isolated (any Actor)? = #isolation
) async -> Bool {
    let done = Flag()
    Task.detached {
        _ = await task.value
        done.set()
    }
    return await eventually(within: seconds) { done.isSet }
}

/// A flag set once, from any thread.
final class Flag: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .acquiring) }
    func set() { flag.store(true, ordering: .releasing) }
}

/// Lets go of `object` and says whether it was deallocated.
func isReleased<T: AnyObject>(making make: () -> T, afterUsing use: (T) -> Void) -> Bool {
    weak var weakObject: T?
    do {
        let object = make()
        weakObject = object
        use(object)
    }
    return weakObject == nil
}
