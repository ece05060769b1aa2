// What a block-based observation costs, measured in one process against
// the observations made before it (which share its listener): a ratio with
// a generous threshold, never an absolute time.

import Testing

@testable import SafeObserve

@Suite(
    "KeyValueObservation scaling", .serialized,
    .disabled(if: StressConfig.isSanitized, "a sanitizer's own costs would be measured, not the library's"))
struct KeyValueObservationScalingTests {
    /// `observe` (amortized O(1) for one property): an observation made,
    /// then ended (invalidated, or released), costs what it costs with
    /// 20,000 other observations — of the same property and of other
    /// objects — all of which share its listener.
    @Test func observe_doesNotScaleWithOtherObservations() {
        /// 100 observations of `counter` invalidated, and 100 released.
        func observations(of counter: Counter) -> Duration {
            fastest(of: 5) {
                for _ in 0..<100 {
                    counter.observe(\.count, options: [.new], isolation: nil) { _, _ in }.invalidate()
                    _ = counter.observe(\.count, options: [.new], isolation: nil) { _, _ in }
                }
            }
        }
        /// `count` observations of `counter` and `count` of other objects.
        func others(_ count: Int, besides counter: Counter) -> ([KeyValueObservation], [Counter]) {
            let objects = (0..<count).map { _ in Counter() }
            let observations =
                (0..<count).map { _ in counter.observe(\.count, isolation: nil) { _, _ in } }
                + objects.map { $0.observe(\.count, isolation: nil) { _, _ in } }
            return (observations, objects)
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on an object of its own, so that it has no observations of an earlier one.
        let ratio = smallestRatios(below: 4) {
            let counter = Counter()
            let few = others(4, besides: counter)
            let early = observations(of: counter)
            let many = others(10_000, besides: counter)
            let late = observations(of: counter)
            withExtendedLifetime((few, many)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "observe with 20,000 other observations costs \(ratio)× what it costs with 8 (last attempt \(describe(last.early)) → \(describe(last.late)) per 200)"
        )
    }
}
