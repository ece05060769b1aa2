// What a controller's operations cost, measured in one process: the n-th
// operation against an early one, with many relations in the controller or
// elsewhere, and the cost per relation at 20,000 against 200. Ratios with
// generous thresholds (the defects these pin cost 10–1,000×), never an
// absolute time.

import Testing

@testable import SafeObserve

@Suite(
    "ObservationController scaling", .serialized,
    .disabled(if: StressConfig.isSanitized, "a sanitizer's own costs would be measured, not the library's"))
struct ObservationControllerScalingTests {
    /// `observe…` (closure, action and delegate: O(*k*) expected; several
    /// key paths: O(*p*·*k*)), `unobserve(_:keyPath:)` and `unobserve(_:)`
    /// (O(*k*) expected), *k* being the key paths the controller observes on
    /// the object: they cost what they cost for a controller of 8 other
    /// objects, for one of 20,000.
    @Test func observingAndUnobservingAnObject_doesNotScaleWithTheControllersOtherObjects() {
        let objects = (0..<50).map { _ in Counter() }
        /// 50 × each style of `observe`, each ended by an `unobserve`.
        func observations(by controller: ObservationController<FinalControllerObserver>) -> Duration {
            fastest(of: 5) {
                for object in objects {
                    controller.observe(object, keyPath: \.count, isolation: nil) { _, _, _ in }
                    controller.unobserve(object, keyPath: \.count)
                    controller.observe(
                        object, keyPath: \.count, isolation: nil, action: FinalControllerObserver.refresh)
                    controller.unobserve(object)
                    controller.observe(object, keyPath: \.count, isolation: nil)  // the delegate
                    controller.unobserve(object, keyPath: \.count)
                    controller.observe(object, keyPaths: \.count, \.title, isolation: nil) { _, _, _ in }
                    controller.unobserve(object)
                }
            }
        }
        /// `count` other objects `controller` observes (and retains).
        func others(_ count: Int, observedBy controller: ObservationController<FinalControllerObserver>) -> [Counter] {
            let others = (0..<count).map { _ in Counter() }
            for other in others { controller.observe(other, keyPath: \.count, isolation: nil) { _, _, _ in } }
            return others
        }
        var last = (early: Duration.zero, late: Duration.zero, relations: 0)
        // Each attempt with a controller of its own.
        let ratio = smallestRatios(below: 4) {
            let observer = FinalControllerObserver()
            let controller = observer.observationController
            let few = others(8, observedBy: controller)
            let early = observations(by: controller)
            let many = others(20_000, observedBy: controller)
            let late = observations(by: controller)
            last = (early, late, controller.relations.count)
            withExtendedLifetime((observer, few, many)) {}
            return [late / early]
        }[0]
        #expect(last.relations == 20_008)
        #expect(
            ratio < 4,
            "observing and unobserving with 20,008 other objects costs \(ratio)× what it costs with 8 (last attempt \(describe(last.early)) → \(describe(last.late)) per 50)"
        )
    }

    /// `unobserveAll()` and `debugDescription` (O(*n*) in the controller's
    /// relations): 20,000 relations of other controllers and listeners
    /// change nothing.
    @Test func unobserveAllAndDebugDescription_doNotScaleWithOtherControllersRelations() {
        /// 50 × (`controller` observes `objects`, describes, unobserves all).
        func rounds(
            of controller: ObservationController<FinalControllerObserver>, observing objects: [Counter]
        ) -> Duration {
            fastest(of: 5) {
                for _ in 0..<50 {
                    for object in objects {
                        controller.observe(object, keyPath: \.count, isolation: nil) { _, _, _ in }
                    }
                    _ = controller.debugDescription
                    controller.unobserveAll()
                }
            }
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt with a controller, objects and other controllers of its own.
        let ratio = smallestRatios(below: 4) {
            let observer = FinalControllerObserver()
            let controller = observer.observationController
            let objects = (0..<8).map { _ in Counter() }
            let early = rounds(of: controller, observing: objects)
            let otherObservers = (0..<10).map { _ in FinalControllerObserver() }
            let otherObjects = (0..<2_000).map { _ in Counter() }
            for other in otherObservers {
                for object in otherObjects {
                    other.observationController.observe(object, keyPath: \.count, isolation: nil) { _, _, _ in }
                }
            }
            for object in objects { object.safeObserve(\.count, by: otherObservers[0]) { _, _, _ in } }
            let late = rounds(of: controller, observing: objects)
            withExtendedLifetime((observer, otherObservers, otherObjects)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "unobserveAll() and debugDescription with 20,000 other controllers' relations cost \(ratio)× what they cost without (last attempt \(describe(last.early)) → \(describe(last.late)) per 50)"
        )
    }

    /// `unobserveAll()` and `debugDescription` are O(*n*): each relation
    /// costs at 10,000 what it costs at 100. (Fewer relations than
    /// elsewhere: each run observes them all again, at microseconds a
    /// registration in a debug build; a quadratic cost would still be 100×
    /// more per relation: measured 74× to 105×. The bound is 8: in an
    /// optimized parallel run of the whole suite, the linear cost reached
    /// 4.3×, its 10,000 objects out of the cache.)
    @Test func unobserveAllAndDebugDescription_costTheSamePerRelation_with10000AsWith100() {
        /// `rounds` × (a controller observing `count` objects, described,
        /// then unobserving all): the time of the descriptions and of the
        /// `unobserveAll()`, each the fastest of 3 runs.
        func timing(_ rounds: Int, of count: Int) -> (describing: Duration, unobservingAll: Duration) {
            let observer = FinalControllerObserver()
            let controller = observer.observationController
            let objects = (0..<count).map { _ in Counter() }
            let clock = ContinuousClock()
            var best = (describing: Duration.seconds(1_000_000), unobservingAll: Duration.seconds(1_000_000))
            for _ in 0..<3 {
                var run = (describing: Duration.zero, unobservingAll: Duration.zero)
                for _ in 0..<rounds {
                    for object in objects {
                        controller.observe(object, keyPath: \.count, isolation: nil) { _, _, _ in }
                    }
                    run.describing += clock.measure { _ = controller.debugDescription }
                    run.unobservingAll += clock.measure { controller.unobserveAll() }
                }
                best = (min(best.describing, run.describing), min(best.unobservingAll, run.unobservingAll))
            }
            withExtendedLifetime((observer, objects)) {}
            return best
        }
        // 10,000 relations described and ended on each side.
        var timings: [(early: Duration, late: Duration)] = []
        let ratios = smallestRatios(below: 8) {
            let early = timing(100, of: 100)
            let late = timing(1, of: 10_000)
            timings = [(early.describing, late.describing), (early.unobservingAll, late.unobservingAll)]
            return timings.map { $0.late / $0.early }
        }
        for (index, label) in ["debugDescription", "unobserveAll()"].enumerated() {
            let (ratio, timing) = (ratios[index], timings[index])
            #expect(
                ratio < 8,
                "\(label) costs \(ratio)× per relation with 10,000 what it costs with 100 (last attempt \(describe(timing.early)) → \(describe(timing.late)) per 10,000)"
            )
        }
    }

    /// `observationController` (O(1)): owners' controllers are found at the
    /// same cost when each holds 2,500 relations among 2,000 other owners'
    /// controllers as when each holds one among 8. (Eight owners on each
    /// side: the cost of one look-up varies a little with the owner's
    /// address.)
    @Test func theOwnersController_isFoundInConstantTime_whateverItAndOthersHold() {
        /// 8 × 1,250 look-ups of each owner's controller.
        func lookUps(of owners: [FinalControllerObserver]) -> Duration {
            fastest(of: 9) {
                for owner in owners {
                    for _ in 0..<1_250 { _ = owner.observationController }
                }
            }
        }
        /// 8 owners whose controllers observe `count` objects each, and
        /// `others` other owners, each observing one of them.
        func owners(observing count: Int, among others: Int) -> ([FinalControllerObserver], [AnyObject]) {
            let owners = (0..<8).map { _ in FinalControllerObserver() }
            let objects = (0..<count).map { _ in Counter() }
            for owner in owners {
                for object in objects { owner.observationController.observe(object, keyPath: \.count) { _, _, _ in } }
            }
            let otherOwners = (0..<others).map { _ in FinalControllerObserver() }
            for (other, object) in zip(otherOwners, objects + objects) {
                other.observationController.observe(object, keyPath: \.count) { _, _, _ in }
            }
            return (owners, objects + otherOwners)
        }
        var last = (early: Duration.zero, late: Duration.zero)
        let ratio = smallestRatios(below: 4) {
            let (quiet, quietKept) = owners(observing: 1, among: 8)
            let early = lookUps(of: quiet)
            let (busy, busyKept) = owners(observing: 2_500, among: 2_000)
            let late = lookUps(of: busy)
            withExtendedLifetime((quietKept, busyKept)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "observationController with 2,500 relations each among 2,000 owners costs \(ratio)× what it costs with one among 8 (last attempt \(describe(last.early)) → \(describe(last.late)) per 10,000)"
        )
    }
}
