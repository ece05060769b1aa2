import Dispatch
import Testing

@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#endif

/// Regressions for lock-ordering bugs. The general concurrency stress suite
/// is ConcurrencyStressTests; SAFEOBSERVE_STRESS_ITERATIONS scales both.
@Suite("Thread safety regressions")
struct ThreadSafetyTests {
    /// Sweeps used to take a transient strong reference to each listener they
    /// inspected, under the channel's lock. When that was the last reference,
    /// the listener's deinit ran under the lock and deadlocked on it: a plain
    /// listener whose deinit unobserves (as migrated KVO code does), or a
    /// SafeObserver with an empty deinit, whose ObserverLifetime removes its
    /// relations from that very channel.
    @Test(arguments: [false, true])
    func listenersDyingDuringSweeps_doNotDeadlock(optIn: Bool) {
        for _ in 0..<StressConfig.rounds(100) {
            let counter = Counter()  // never mutated: concurrent registrations only read it
            let lifetimes = LifetimeCounter()
            var doomed: [RecordingListener] = []
            for _ in 0..<64 {
                let listener: RecordingListener
                if optIn {
                    listener = OptInListener(lifetime: lifetimes)
                } else {
                    listener = Listener(lifetime: lifetimes)
                    listener.onDeinit = { [counter] listener in counter.safeUnobserve(by: listener) }
                }
                counter.safeObserve(\.count, by: listener) { _, _, _ in }
                doomed.append(listener)
            }
            let box = ReleaseBox(doomed)
            doomed = []
            let shared = UncheckedSendable(counter)
            DispatchQueue.concurrentPerform(iterations: 3) { worker in
                if worker == 0 {
                    while box.releaseOne() {}
                } else {
                    for _ in 0..<64 {
                        shared.value.safeObserve(\.count, by: Peer()) { _, _, _ in }  // sweeps two old relations
                    }
                }
            }
            #expect(lifetimes.liveCount == 0, "Listener leaked")
        }
    }
}
