// What a change of an `@Observed` property costs, measured in one process:
// the same change with many relations elsewhere, and the cost per relation
// at 20,000 against 200. Ratios with generous thresholds (the defects
// these pin cost 10–1,000×), never an absolute time.

import Testing

@testable import SafeObserve

@Suite(
    "A change costs its own relations", .serialized,
    .disabled(if: StressConfig.isSanitized, "a sanitizer's own costs would be measured, not the library's"))
struct ChangeScalingTests {
    /// `count` listeners observing `title` of `object`, and `count` other
    /// objects' `count`, each by a listener of its own.
    private struct Elsewhere {
        let listeners: [Listener]
        let objects: [Counter]

        init(_ count: Int, besides object: Counter) {
            listeners = (0..<(2 * count)).map { _ in Listener() }
            objects = (0..<count).map { _ in Counter() }
            for listener in listeners[..<count] { object.safeObserve(\.title, by: listener) { _, _, _ in } }
            for (other, listener) in zip(objects, listeners[count...]) {
                other.safeObserve(\.count, by: listener) { _, _, _ in }
            }
        }
    }

    /// The `Observed` setter (O(1) when nobody observes the property): a
    /// property never observed, and one no longer observed, are set at the
    /// same cost with 20,000 relations on the object's other property and
    /// 20,000 on other objects.
    @Test func anUnobservedSetter_doesNotScaleWithTheRelationsElsewhere() {
        /// 10,000 stores into each.
        func stores(into object: Counter, _ unobservedAgain: Counter) -> Duration {
            fastest(of: 5) {
                for value in 0..<10_000 {
                    object.count = value
                    unobservedAgain.count = value
                }
            }
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on objects of its own, so that none has relations of an earlier one.
        let ratio = smallestRatios(below: 4) {
            let object = Counter()
            let unobservedAgain = Counter()
            let token = unobservedAgain.safeObserve(\.count, by: Listener()) { _, _, _ in }
            token.invalidate()
            let few = (Elsewhere(8, besides: object), Elsewhere(8, besides: unobservedAgain))
            let early = stores(into: object, unobservedAgain)
            let many = (Elsewhere(10_000, besides: object), Elsewhere(10_000, besides: unobservedAgain))
            let late = stores(into: object, unobservedAgain)
            withExtendedLifetime((few, many)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "an unobserved store with 40,000 relations elsewhere costs \(ratio)× what it costs with 32 (last attempt \(describe(last.early)) → \(describe(last.late)) per 20,000)"
        )
    }

    /// The `Observed` setter (one lock plus one call per relation on the
    /// property): a property with one relation is set at the same cost
    /// with 20,000 relations on the object's other property and 20,000 on
    /// other objects.
    @Test func anObservedSetter_doesNotScaleWithOtherPropertiesRelations() {
        /// 2,000 stores, each delivered to the one relation.
        func stores(into object: Counter) -> Duration {
            fastest(of: 5) {
                for value in 0..<2_000 { object.count = value }
            }
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on an object of its own, so that it has no relations of an earlier one.
        let ratio = smallestRatios(below: 4) {
            let object = Counter()
            let listener = Listener()
            object.safeObserve(\.count, by: listener) { _, _, _ in }
            let few = Elsewhere(8, besides: object)
            let early = stores(into: object)
            let many = Elsewhere(20_000, besides: object)
            let late = stores(into: object)
            withExtendedLifetime((listener, few, many)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "an observed store with 40,000 relations on other properties costs \(ratio)× what it costs with 16 (last attempt \(describe(last.early)) → \(describe(last.late)) per 2,000)"
        )
    }

    /// The `Observed` setter calls each relation once: a store costs at
    /// 20,000 relations what it costs at 200, per relation.
    @Test func anObservedSetter_costsTheSamePerRelation_with20000AsWith200() {
        /// `stores` stores into a property with `count` relations.
        func storing(_ stores: Int, with count: Int) -> Duration {
            let object = Counter()
            let listeners = (0..<count).map { _ in Listener() }
            for listener in listeners { object.safeObserve(\.count, by: listener) { _, _, _ in } }
            let duration = fastest(of: 5) {
                for value in 0..<stores { object.count = value }
            }
            withExtendedLifetime(listeners) {}
            return duration
        }
        // 40,000 deliveries on each side.
        var last = (early: Duration.zero, late: Duration.zero)
        let ratio = smallestRatios(below: 4) {
            last = (storing(200, with: 200), storing(2, with: 20_000))
            return [last.late / last.early]
        }[0]
        #expect(
            ratio < 4,
            "a store costs \(ratio)× per relation with 20,000 what it costs with 200 (last attempt \(describe(last.early)) → \(describe(last.late)) per 40,000 deliveries)"
        )
    }
}
