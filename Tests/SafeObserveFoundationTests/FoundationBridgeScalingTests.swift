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
        let center = NotificationCenter()
        let object = Plain()
        /// 50 × (observe the name from the object, then unobserve it) by `listener`.
        func observeAndUnobserve(by listener: Plain) -> Duration {
            fastest(of: 5) {
                for _ in 0..<50 {
                    center.safeObserve(.scaled, object: object, by: listener, isolation: nil) { _, _ in }
                    center.safeUnobserve(.scaled, object: object, by: listener)
                }
            }
        }
        let alone = Plain()
        let early = observeAndUnobserve(by: alone)
        let busy = Plain()
        let others = (0..<20_000).map { _ in Plain() }
        for other in others { center.safeObserve(.scaled, object: other, by: busy, isolation: nil) { _, _ in } }
        let late = observeAndUnobserve(by: busy)
        let ratio = late / early
        #expect(
            ratio < 4,
            "safeUnobserve(_:object:by:) by a listener of 20,000 other objects costs \(ratio)× what it costs for a listener of none (\(describe(early)) → \(describe(late)) per 50)"
        )
        withExtendedLifetime((alone, busy, others, object)) {}
    }

    /// `safeUnobserve(_:by:)` without an object and `safeUnobserve(object:by:)`
    /// (O(*n*) in the listener's observations): they visit the listener's
    /// observations, not the center's other ones.
    @Test func unobservingANameOrAnObject_doesNotScaleWithTheCentersOtherObservations() {
        let center = NotificationCenter()
        let object = Plain()
        let listener = Plain()
        /// 50 × (observe the name from the object; unobserve the name;
        /// observe again; unobserve the object).
        func observeAndUnobserve() -> Duration {
            fastest(of: 5) {
                for _ in 0..<50 {
                    center.safeObserve(.scaled, object: object, by: listener, isolation: nil) { _, _ in }
                    center.safeUnobserve(.scaled, by: listener)
                    center.safeObserve(.scaled, object: object, by: listener, isolation: nil) { _, _ in }
                    center.safeUnobserve(object: object, by: listener)
                }
            }
        }
        let few = Crowd(8, on: center)
        let early = observeAndUnobserve()
        let many = Crowd(10_000, on: center, offset: 8)
        let late = observeAndUnobserve()
        let ratio = late / early
        #expect(
            ratio < 4,
            "unobserving a name or an object with 30,000 other observations on the center costs \(ratio)× what it costs with 24 (\(describe(early)) → \(describe(late)) per 50)"
        )
        withExtendedLifetime((object, listener, few, many)) {}
    }

    /// `safeRelations()` (O(*c* + *n* log *n*) in the center's names and
    /// objects and its observations) and `safeRelations(observedBy:)`
    /// (O(*n* log *n*) in the listener's observations): another center's
    /// observations, and, for the listener's, the center's other
    /// listeners', change nothing.
    @Test func listingACentersObservations_doesNotScaleWithOtherCentersOrListeners() {
        let center = NotificationCenter()
        let listener = Plain()
        let objects = (0..<4).map { _ in Plain() }
        center.safeObserve(.scaled, by: listener, isolation: nil) { _, _ in }
        for object in objects { center.safeObserve(.scaled, object: object, by: listener, isolation: nil) { _, _ in } }
        /// 200 × the center's observations.
        func centerListing() -> Duration { fastest(of: 9) { for _ in 0..<200 { _ = center.safeRelations() } } }
        /// 200 × the listener's.
        func listenerListing() -> Duration {
            fastest(of: 9) { for _ in 0..<200 { _ = center.safeRelations(observedBy: listener) } }
        }
        let early = (center: centerListing(), listener: listenerListing())
        let otherCenter = NotificationCenter()
        let elsewhere = Crowd(10_000, on: otherCenter)
        let afterOtherCenters = (center: centerListing(), listener: listenerListing())
        #expect(center.safeRelations().count == 5)
        let otherListeners = (0..<20_000).map { _ in Plain() }
        for other in otherListeners { center.safeObserve(.crowded, by: other, isolation: nil) { _, _ in } }
        let afterOtherListeners = listenerListing()
        for (label, early, late) in [
            ("safeRelations() with 30,000 observations on another center", early.center, afterOtherCenters.center),
            (
                "safeRelations(observedBy:) with 30,000 observations on another center", early.listener,
                afterOtherCenters.listener
            ),
            (
                "safeRelations(observedBy:) with 20,000 other listeners on the center", early.listener,
                afterOtherListeners
            ),
        ] {
            let ratio = late / early
            #expect(
                ratio < 4,
                "\(label) costs \(ratio)× what it costs without (\(describe(early)) → \(describe(late)) per 200)")
        }
        withExtendedLifetime((objects, otherCenter, elsewhere, otherListeners)) {}
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
        let early = listings(100, of: 100)
        let late = listings(1, of: 10_000)
        for (label, early, late) in [
            ("safeRelations()", early.center, late.center),
            ("safeRelations(observedBy:)", early.listener, late.listener),
        ] {
            let ratio = late / early
            #expect(
                ratio < 4,
                "\(label) costs \(ratio)× per observation with 10,000 what it costs with 100 (\(describe(early)) → \(describe(late)) per 10,000 listed)"
            )
        }
    }
}
