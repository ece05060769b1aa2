import Testing

@testable import SafeObserve

/// LifetimesAndTeardown.md, "Removal is idempotent": removal may be called
/// "inside the listener's own `deinit`"; MigratingFromKVO.md: `removeObserver`
/// calls in `deinit` "translate to `safeUnobserve`, which is safe there".
@Suite("Removal inside the listener's deinit")
struct RemovalInDeinitTests {
    @Test(arguments: [false, true])
    func everyRemovalCalledInsideTheListenersDeinit_isSafe_andEndsItsRelations(optIn: Bool) {
        let counter = Counter()
        let lifetime = LifetimeCounter()
        do {
            let captured = Captured(lifetime)
            let listener: RecordingListener = optIn ? OptInListener() : Listener()
            let token = counter.safeObserve(\.count, by: listener) { [captured] listener, _, _ in
                listener.record("\(captured)")
            }
            counter.safeObserve(\.title, by: listener) { _, _, _ in }
            listener.onDeinit = { listener in
                counter.safeUnobserve(\.count, by: listener)
                counter.safeUnobserve(by: listener)
                token.invalidate()
                SafeObservation.removeAll(observedBy: listener)
                counter.safeUnobserve(by: listener)
            }
        }
        #expect(SafeObservation.relations(of: counter).isEmpty)
        #expect(lifetime.liveCount == 0, "the handler and what it captured are released")
        counter.count += 1
    }
}
