// The bridge's complexity claims, each measured in one process: an
// operation against the same one with many observations elsewhere, and the
// cost per observation listed at 20,000 against 200. Ratios with generous
// thresholds (the defects these pin cost 10–1,000×), never an absolute time.

import Foundation
import SafeObserve
import SafeObserveFoundation
import Testing

extension Notification.Name {
    fileprivate static let scaled = Notification.Name("FoundationBridgeScalingTests.scaled")
    fileprivate static let crowded = Notification.Name("FoundationBridgeScalingTests.crowded")
}

private final class Plain: Sendable {}

@Suite(
    "Foundation bridge scaling", .serialized,
    .disabled(if: isSanitized, "a sanitizer's own costs would be measured, not the bridge's"))
struct FoundationBridgeScalingTests {
    /// `count` listeners on `center`, each observing a name of its own, a
    /// shared name, and the shared name from an object of its own.
    private struct Crowd {
        let listeners: [Plain]
        let objects: [Plain]

        init(_ count: Int, on center: NotificationCenter, offset: Int = 0) {
            listeners = (0..<count).map { _ in Plain() }
            objects = (0..<count).map { _ in Plain() }
            for (index, (listener, object)) in zip(listeners, objects).enumerated() {
                let own = Notification.Name("FoundationBridgeScalingTests.own.\((offset + index) % 64)")
                center.safeObserve(own, by: listener, isolation: nil) { _, _ in }
                center.safeObserve(.crowded, by: listener, isolation: nil) { _, _ in }
                center.safeObserve(.crowded, object: object, by: listener, isolation: nil) { _, _ in }
            }
        }
    }

    /// `safeUnobserve(_:object:by:)` with an object (O(*k*) expected, *k* the
    /// listener's observations of that name and object): a listener that
    /// observes 20,000 other objects removes one as fast as a listener of
    /// none.
    @Test func unobservingANameFromAnObject_doesNotScaleWithTheListenersOtherObservations() {
        let object = Plain()
        let others = (0..<20_000).map { _ in Plain() }
        /// 50 × (observe the name from the object, then unobserve it) by `listener` on `center`.
        func observeAndUnobserve(on center: NotificationCenter, by listener: Plain) -> Duration {
            fastest(of: 5) {
                for _ in 0..<50 {
                    center.safeObserve(.scaled, object: object, by: listener, isolation: nil) { _, _ in }
                    center.safeUnobserve(.scaled, object: object, by: listener)
                }
            }
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on a center of its own.
        let ratio = smallestRatios(below: 4) {
            let center = NotificationCenter()
            let alone = Plain()
            let early = observeAndUnobserve(on: center, by: alone)
            let busy = Plain()
            for other in others { center.safeObserve(.scaled, object: other, by: busy, isolation: nil) { _, _ in } }
            let late = observeAndUnobserve(on: center, by: busy)
            withExtendedLifetime((alone, busy)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "safeUnobserve(_:object:by:) by a listener of 20,000 other objects costs \(ratio)× what it costs for a listener of none (last attempt \(describe(last.early)) → \(describe(last.late)) per 50)"
        )
        withExtendedLifetime((others, object)) {}
    }

    /// `safeUnobserve(_:by:)` without an object and `safeUnobserve(object:by:)`
    /// (O(*n*) in the listener's observations): they visit the listener's
    /// observations, not the center's other ones.
    @Test func unobservingANameOrAnObject_doesNotScaleWithTheCentersOtherObservations() {
        let object = Plain()
        let listener = Plain()
        /// 50 × (observe the name from the object; unobserve the name;
        /// observe again; unobserve the object) on `center`.
        func observeAndUnobserve(on center: NotificationCenter) -> Duration {
            fastest(of: 5) {
                for _ in 0..<50 {
                    center.safeObserve(.scaled, object: object, by: listener, isolation: nil) { _, _ in }
                    center.safeUnobserve(.scaled, by: listener)
                    center.safeObserve(.scaled, object: object, by: listener, isolation: nil) { _, _ in }
                    center.safeUnobserve(object: object, by: listener)
                }
            }
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on a center of its own.
        let ratio = smallestRatios(below: 4) {
            let center = NotificationCenter()
            let few = Crowd(8, on: center)
            let early = observeAndUnobserve(on: center)
            let many = Crowd(10_000, on: center, offset: 8)
            let late = observeAndUnobserve(on: center)
            withExtendedLifetime((few, many)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "unobserving a name or an object with 30,000 other observations on the center costs \(ratio)× what it costs with 24 (last attempt \(describe(last.early)) → \(describe(last.late)) per 50)"
        )
        withExtendedLifetime((object, listener)) {}
    }

    /// `safeRelations()` (O(*c* + *n* log *n*) in the center's names and
    /// objects and its observations) and `safeRelations(observedBy:)`
    /// (O(*n* log *n*) in the listener's observations): another center's
    /// observations, and, for the listener's, the center's other
    /// listeners', change nothing.
    @Test func listingACentersObservations_doesNotScaleWithOtherCentersOrListeners() {
        let objects = (0..<4).map { _ in Plain() }
        let otherListeners = (0..<20_000).map { _ in Plain() }
        /// 200 × the observations of `center`.
        func centerListing(_ center: NotificationCenter) -> Duration {
            fastest(of: 9) { for _ in 0..<200 { _ = center.safeRelations() } }
        }
        /// 200 × those of `listener` on `center`.
        func listenerListing(_ center: NotificationCenter, _ listener: Plain) -> Duration {
            fastest(of: 9) { for _ in 0..<200 { _ = center.safeRelations(observedBy: listener) } }
        }
        var last: [(early: Duration, late: Duration)] = []
        var listed = 0
        // Each attempt with centers and a listener of its own.
        let ratios = smallestRatios(below: 4) {
            let center = NotificationCenter()
            let listener = Plain()
            center.safeObserve(.scaled, by: listener, isolation: nil) { _, _ in }
            for object in objects {
                center.safeObserve(.scaled, object: object, by: listener, isolation: nil) { _, _ in }
            }
            let early = (center: centerListing(center), listener: listenerListing(center, listener))
            let otherCenter = NotificationCenter()
            let elsewhere = Crowd(10_000, on: otherCenter)
            let afterOtherCenters = (center: centerListing(center), listener: listenerListing(center, listener))
            listed = center.safeRelations().count
            for other in otherListeners { center.safeObserve(.crowded, by: other, isolation: nil) { _, _ in } }
            let afterOtherListeners = listenerListing(center, listener)
            withExtendedLifetime((otherCenter, elsewhere)) {}
            last = [
                (early.center, afterOtherCenters.center), (early.listener, afterOtherCenters.listener),
                (early.listener, afterOtherListeners),
            ]
            return last.map { $0.late / $0.early }
        }
        #expect(listed == 5)
        let labels = [
            "safeRelations() with 30,000 observations on another center",
            "safeRelations(observedBy:) with 30,000 observations on another center",
            "safeRelations(observedBy:) with 20,000 other listeners on the center",
        ]
        for ((label, (early, late)), ratio) in zip(zip(labels, last), ratios) {
            #expect(
                ratio < 4,
                "\(label) costs \(ratio)× what it costs without (last attempt \(describe(early)) → \(describe(late)) per 200)"
            )
        }
        withExtendedLifetime((objects, otherListeners)) {}
    }

    /// `safeRelations()` and `safeRelations(observedBy:)` are O(*n* log *n*):
    /// each observation listed costs at 10,000 within a small factor (a
    /// log's) of what it costs at 100.
    @Test func listingACentersObservations_costsAboutTheSamePerObservation_with10000AsWith100() {
        /// `times` × the observations of a center where one listener
        /// observes `count` objects, and `times` × that listener's.
        func listings(_ times: Int, of count: Int) -> (center: Duration, listener: Duration) {
            let center = NotificationCenter()
            let listener = Plain()
            let objects = (0..<count).map { _ in Plain() }
            for object in objects {
                center.safeObserve(.scaled, object: object, by: listener, isolation: nil) { _, _ in }
            }
            let durations = (
                fastest(of: 5) { for _ in 0..<times { _ = center.safeRelations() } },
                fastest(of: 5) { for _ in 0..<times { _ = center.safeRelations(observedBy: listener) } }
            )
            withExtendedLifetime((listener, objects)) {}
            return durations
        }
        // 10,000 observations listed on each side.
        var last: [(early: Duration, late: Duration)] = []
        // Six attempts: one listing of 10,000 takes milliseconds, and on a
        // machine shared with other processes it read 5.7× in all three of
        // three attempts (an O(n²) listing reads about 100×).
        let ratios = smallestRatios(attempts: 6, below: 4) {
            let early = listings(100, of: 100)
            let late = listings(1, of: 10_000)
            last = [(early.center, late.center), (early.listener, late.listener)]
            return last.map { $0.late / $0.early }
        }
        let labels = ["safeRelations()", "safeRelations(observedBy:)"]
        for ((label, (early, late)), ratio) in zip(zip(labels, last), ratios) {
            #expect(
                ratio < 4,
                "\(label) costs \(ratio)× per observation with 10,000 what it costs with 100 (last attempt \(describe(early)) → \(describe(late)) per 10,000 listed)"
            )
        }
    }
}
