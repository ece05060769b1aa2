import Synchronization

@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#endif

/// Waits up to `seconds` for `condition`, and returns it.
///
/// For leak checks after concurrent work: other tests run in parallel, and a
/// sweep on one of their threads (the proxy table's amortized sweep, or
/// `sweepAll`) may be ending one of our dead listener's relations at that very
/// moment; the handler is then released moments later, on that thread (see
/// the LifetimesAndTeardown article). Still a leak if it never happens.
func settles(within seconds: Double = 5, _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
    while !condition() {
        guard ContinuousClock.now < deadline else { return false }
        usleep(1_000)
    }
    return true
}

/// Waits (polling, with a deadline) until `condition` holds, and returns it;
/// the condition is evaluated in the caller's isolation.
///
/// Up to five minutes: the whole suite runs in parallel on the cooperative
/// pool's threads (two here), and a job the condition waits for (a
/// delivery on an actor, say) may wait behind the other tests'. Under the
/// thread sanitizer, on a loaded machine, main-actor jobs once waited about
/// eight minutes behind the stress tests, so 30 seconds was not enough.
/// A passing wait returns at its first true poll. A failing one polls at
/// least 3,000 times (so a process stalled past the deadline, say a paused
/// machine, still gives the condition six seconds of polls), and prints
/// how long it waited, how often it polled and its longest gap between
/// polls, so that a failure tells a starved poller from a starved job.
func eventually(isolation: isolated (any Actor)? = #isolation, _ condition: () -> Bool) async -> Bool {
    let clock = ContinuousClock()
    let start = clock.now
    var polls = 0
    var last = start
    var longestGap = Duration.zero
    while !condition() {
        let now = clock.now
        longestGap = max(longestGap, now - last)
        last = now
        if polls >= 3_000, now - start > .seconds(300) {
            print("eventually: gave up after \(now - start), \(polls) polls, longest gap \(longestGap)")
            return false
        }
        polls += 1
        try? await Task.sleep(for: .milliseconds(2))
    }
    return true
}

/// A flag set once, from any thread.
final class Flag: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .acquiring) }
    func set() { flag.store(true, ordering: .releasing) }
}

/// Inside an exit test's process: reports a failed check on standard output,
/// which the parent test expects to be empty (a failed exit test returns no
/// output, so a crash would lose the message).
func expectInChild(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { print(message()) }
}

/// Counts live instances of the test fixtures (deinit counters for leak tests).
final class LifetimeCounter: Sendable {
    private let live = Atomic<Int>(0)
    private let deinits = Atomic<Int>(0)

    var liveCount: Int { live.load(ordering: .relaxed) }
    var deinitCount: Int { deinits.load(ordering: .relaxed) }

    func didInit() { live.add(1, ordering: .relaxed) }
    func didDeinit() {
        live.subtract(1, ordering: .relaxed)
        deinits.add(1, ordering: .relaxed)
    }
}

/// An observed object with two properties and a deinit counter.
final class Counter: SafeObservable {
    @Observed var count = 0
    @Observed var title = "untitled"
    let lifetime: LifetimeCounter?
    /// Runs inside deinit (to mutate or unobserve there).
    var onDeinit: ((Counter) -> Void)?

    init(count: Int = 0, lifetime: LifetimeCounter? = nil) {
        self.count = count
        self.lifetime = lifetime
        lifetime?.didInit()
    }

    deinit {
        onDeinit?(self)
        lifetime?.didDeinit()
    }
}

/// A listener that records what it receives and counts its lifetime.
class RecordingListener {
    let lifetime: LifetimeCounter?
    let received = _Mutex<[String]>([])
    /// Runs inside deinit (to unobserve or observe there).
    var onDeinit: ((RecordingListener) -> Void)?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }

    func record(_ entry: String) { received.withLock { $0.append(entry) } }
    var log: [String] { received.withLock { $0 } }

    deinit {
        onDeinit?(self)
        lifetime?.didDeinit()
    }
}

/// A plain listener: any class can listen.
// @unchecked Sendable: `received` is locked, and `onDeinit` is set only
// before the listener is shared.
final class Listener: RecordingListener, @unchecked Sendable {}

/// A listener that opts in to teardown inside its own deinit.
final class OptInListener: RecordingListener, SafeObserver {
    let observerLifetime = ObserverLifetime()
}

/// Something a handler captures, to prove the handler was released.
final class Captured: Sendable {
    let lifetime: LifetimeCounter
    init(_ lifetime: LifetimeCounter) {
        self.lifetime = lifetime
        lifetime.didInit()
    }
    deinit { lifetime.didDeinit() }
}

/// Formats a change compactly for assertions: "new old flags".
func describe<Value>(_ change: ObservedChange<Value>) -> String {
    let new = change.newValue.map { "\($0)" } ?? "nil"
    let old = change.oldValue.map { "\($0)" } ?? "nil"
    return "\(old)->\(new)" + (change.isPrior ? " prior" : "") + (change.isInitial ? " initial" : "")
}

/// A thread-safe list of events that handlers may capture.
final class EventLog: Sendable {
    private let events = _Mutex<[String]>([])
    func record(_ event: String) { events.withLock { $0.append(event) } }
    var entries: [String] { events.withLock { $0 } }
}

/// Whether the `@Observed` storage labelled `label` (e.g. "_count") holds a sentinel.
func hasSentinel(_ object: AnyObject, storage label: String) -> Bool {
    for child in Mirror(reflecting: object).children where child.label == label {
        if let storage = child.value as? Observed<Int> { return storage._sentinel != nil }
        if let storage = child.value as? Observed<String> { return storage._sentinel != nil }
    }
    return false
}

/// A listener that handlers may capture (it is Sendable).
final class Peer: Sendable {}

/// Whether the thread sanitizer is linked in (it slows every job several
/// times over, which tests that wait on the runtime's scheduling need to
/// know).
let isThreadSanitizerActive: Bool = {
    #if canImport(Glibc)
        return dlsym(nil, "__tsan_init") != nil
    #else
        return false
    #endif
}()

/// Whether the address sanitizer is linked in (it never reuses freed memory
/// right away, which some tests need to know).
let isAddressSanitizerActive: Bool = {
    #if canImport(Glibc)
        return dlsym(nil, "__asan_init") != nil
    #else
        return false
    #endif
}()
