import Testing

@testable import SafeObserve

/// The `- Complexity:` lines of registration, removal and introspection,
/// tested as the n-th operation against an early one in one process: a
/// ratio, with a threshold far below what the wrong complexity would give
/// (20,000 others would make an O(others) operation hundreds of times slower).
@Suite("Registration, removal and introspection scale with what they touch", .serialized)
struct RegistrationScalingTests {
    static let others = 20_000
    static let batch = 200
    static let threshold = 10.0

    /// `safeObserve` (amortized O(*k*), *k* the listener's key paths on the
    /// object) and `ObservationToken.invalidate()` (amortized O(1)): on an
    /// object with 20,000 other relations they cost what they cost on a
    /// fresh one.
    @Test func observeAndInvalidate_onAnObjectWith20000OtherRelations_costWhatTheyCostOnAFreshOne() {
        let listeners = (0..<Self.batch).map { _ in Listener() }
        func observeAndInvalidate(on counter: Counter) -> Duration {
            fastest(of: 9) {
                for listener in listeners {
                    counter.safeObserve(\.count, by: listener) { _, _, _ in }.invalidate()
                }
            }
        }
        let crowd = (0..<Self.others).map { _ in Listener() }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on objects of its own.
        let ratio = smallestRatios(below: Self.threshold) {
            let fresh = Counter()
            let early = observeAndInvalidate(on: fresh)
            let crowded = Counter()
            for listener in crowd { crowded.safeObserve(\.count, by: listener) { _, _, _ in } }
            let late = observeAndInvalidate(on: crowded)
            withExtendedLifetime((fresh, crowded)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(ratio < Self.threshold, "last attempt: early \(last.early), late \(last.late)")
        withExtendedLifetime((listeners, crowd)) {}
    }

    /// `safeUnobserve(_:by:)` and `safeUnobserve(by:)` (O(*k*), *k* the
    /// listener's key paths on this object): a listener that observes
    /// 20,000 other objects unobserves one as fast as a listener that
    /// observes nothing else.
    @Test func unobserve_byAListenerOf20000OtherObjects_costsWhatItCostsForAListenerOfOne() {
        let objects = (0..<Self.others).map { _ in Counter() }
        func observeAndUnobserve(_ counter: Counter, by listener: Listener) -> Duration {
            fastest(of: 9) {
                for _ in 0..<Self.batch {
                    counter.safeObserve(\.count, by: listener) { _, _, _ in }
                    counter.safeUnobserve(\.count, by: listener)
                    counter.safeObserve(\.title, by: listener) { _, _, _ in }
                    counter.safeUnobserve(by: listener)
                }
            }
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt with an object and listeners of its own.
        let ratio = smallestRatios(below: Self.threshold) {
            let counter = Counter()
            let alone = Listener()
            let early = observeAndUnobserve(counter, by: alone)
            let busy = Listener()
            for object in objects { object.safeObserve(\.count, by: busy) { _, _, _ in } }
            let late = observeAndUnobserve(counter, by: busy)
            withExtendedLifetime((alone, busy)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(ratio < Self.threshold, "last attempt: early \(last.early), late \(last.late)")
        withExtendedLifetime(objects) {}
    }

    /// `SafeObservation.relations(observedBy:)` and `removeAll(observedBy:)`
    /// (O(*n*) in the listener's relations): 20,000 relations of other
    /// listeners in the process change nothing.
    @Test func listingAndRemovingAListenersRelations_ignoresEveryOtherListenersRelations() {
        let counter = Counter()
        func listAndRemove() -> Duration {
            let listeners = (0..<Self.batch).map { _ in Listener() }
            return fastest(of: 9) {
                for listener in listeners {
                    counter.safeObserve(\.count, by: listener) { _, _, _ in }
                    _ = SafeObservation.relations(observedBy: listener)
                    SafeObservation.removeAll(observedBy: listener)
                }
            }
        }
        let objects = (0..<Self.others).map { _ in Counter() }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt with other listeners of its own (their relations end with them).
        let ratio = smallestRatios(below: Self.threshold) {
            let early = listAndRemove()
            let crowd = (0..<Self.others).map { _ in Listener() }
            for (object, listener) in zip(objects, crowd) { object.safeObserve(\.count, by: listener) { _, _, _ in } }
            let late = listAndRemove()
            withExtendedLifetime(crowd) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(ratio < Self.threshold, "last attempt: early \(last.early), late \(last.late)")
        withExtendedLifetime(objects) {}
    }
}
