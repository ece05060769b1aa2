// The introspection's complexity claims, each measured in one process: an
// object's listing against one made with many relations elsewhere, and the
// cost per relation listed at 20,000 against 200. Ratios with generous
// thresholds (the defects these pin cost 10–1,000×), never an absolute time.

import Testing

@testable import SafeObserve

extension NotificationName where Payload == Int {
    fileprivate static let crowded = NotificationName("IntrospectionScalingTests.crowded")
}

@Suite(
    "Introspection scales with what it lists", .serialized,
    .disabled(if: StressConfig.isSanitized, "a sanitizer's own costs would be measured, not the library's"))
struct IntrospectionScalingTests {
    /// Relations on other objects, of other listeners: each of the `count`
    /// objects observed once, by a listener of its own.
    private struct Crowd {
        let objects: [Counter]
        let listeners: [Listener]

        init(count: Int) {
            objects = (0..<count).map { _ in Counter() }
            listeners = (0..<count).map { _ in Listener() }
            for (object, listener) in zip(objects, listeners) {
                object.safeObserve(\.count, by: listener) { _, _, _ in }
            }
        }
    }

    /// Notification relations on a hub of their own: `count` listeners,
    /// each observing one name and one sender.
    private struct HubCrowd {
        let hub = NotificationHub()
        let listeners: [Listener]
        let senders: [Listener]

        init(count: Int) {
            listeners = (0..<count).map { _ in Listener() }
            senders = (0..<count).map { _ in Listener() }
            for (listener, sender) in zip(listeners, senders) {
                hub.observe(.crowded, by: listener, isolation: nil) { _, _ in }
                hub.observe(.crowded, from: sender, by: listener, isolation: nil) { _, _ in }
            }
        }
    }

    /// `object` observed by `count` listeners of its own, on both properties.
    private static func observed(by count: Int) -> (Counter, [Listener]) {
        let object = Counter()
        let listeners = (0..<count).map { _ in Listener() }
        for (index, listener) in listeners.enumerated() {
            if index.isMultiple(of: 2) {
                object.safeObserve(\.count, by: listener) { _, _, _ in }
            } else {
                object.safeObserve(\.title, by: listener) { _, _, _ in }
            }
        }
        return (object, listeners)
    }

    /// `SafeObservation.relations(of:)` (O(*p* + *n*) in the object's
    /// observed properties and their relations): 20,000 relations on other
    /// objects, and 20,000 on a hub, change nothing.
    @Test func relationsOfAnObject_doesNotScaleWithOtherObjectsRelations() {
        let (object, listeners) = Self.observed(by: 8)
        func listing() -> Duration {
            fastest(of: 5) {
                for _ in 0..<200 { _ = SafeObservation.relations(of: object) }
            }
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt with other objects and a hub of its own.
        let ratio = smallestRatios(below: 4) {
            let early = listing()
            let crowd = Crowd(count: 20_000)
            let hubCrowd = HubCrowd(count: 10_000)
            let late = listing()
            withExtendedLifetime((crowd, hubCrowd)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "relations(of:) with 20,000 relations on other objects costs \(ratio)× what it costs with none (last attempt \(describe(last.early)) → \(describe(last.late)) per 200)"
        )
        withExtendedLifetime(listeners) {}
    }

    /// `SafeObservation.relations(of:)` is linear in the object's relations:
    /// each relation listed costs at 20,000 what it costs at 200.
    @Test func relationsOfAnObject_costTheSamePerRelation_with20000AsWith200() {
        let (few, fewListeners) = Self.observed(by: 200)
        let (many, manyListeners) = Self.observed(by: 20_000)
        // 20,000 relations listed on each side.
        var last = (early: Duration.zero, late: Duration.zero)
        let ratio = smallestRatios(below: 4) {
            let early = fastest(of: 5) {
                for _ in 0..<100 { _ = SafeObservation.relations(of: few) }
            }
            let late = fastest(of: 5) { _ = SafeObservation.relations(of: many) }
            last = (early, late)
            return [late / early]
        }[0]
        #expect(SafeObservation.relations(of: many).count == 20_000)
        #expect(
            ratio < 4,
            "relations(of:) costs \(ratio)× per relation with 20,000 what it costs with 200 (last attempt \(describe(last.early)) → \(describe(last.late)) per 20,000 listed)"
        )
        withExtendedLifetime((fewListeners, manyListeners)) {}
    }

    /// `SafeObservation.graph(of:)` (O(*n* log *n*) in the relations
    /// described, plus the live hubs' notification relations): the picture
    /// of one object costs what it costs however many key-path relations
    /// other objects and other listeners have.
    ///
    /// In a process of its own, as both graph tests: the hubs that suites
    /// running in parallel make would be visited too.
    @Test func theGraphOfAnObject_doesNotScaleWithOtherObjectsRelations() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            let (object, listeners) = Self.observed(by: 8)
            func drawing() -> Duration {
                fastest(of: 5) {
                    for _ in 0..<20 { _ = SafeObservation.graph(of: [object]) }
                }
            }
            var last = (early: Duration.zero, late: Duration.zero)
            // Each attempt with other objects of its own.
            let ratio = smallestRatios(below: 4) {
                let early = drawing()
                let crowd = Crowd(count: 20_000)
                let late = drawing()
                withExtendedLifetime(crowd) {}
                last = (early, late)
                return [late / early]
            }[0]
            expectInChild(
                ratio < 4,
                "graph(of:) of one object with 20,000 relations on other objects costs \(ratio)× what it costs with none (last attempt \(describe(last.early)) → \(describe(last.late)) per 20)"
            )
            withExtendedLifetime(listeners) {}
        }
        #expect(result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } == "")
    }

    /// `SafeObservation.graph(of:)` is O(*n* log *n*): each relation
    /// described costs at 5,000 within a small factor of what it costs at
    /// 50 (a log's: 2.2, and the sort's luck with the addresses). Fewer
    /// relations than elsewhere: describing one costs microseconds in a
    /// debug build; a quadratic graph would still cost 100× more per
    /// relation.
    @Test func theGraphOfAnObject_costsAboutTheSamePerRelation_with5000AsWith50() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            let (few, fewListeners) = Self.observed(by: 50)
            let (many, manyListeners) = Self.observed(by: 5_000)
            // 5,000 relations described on each side.
            var last = (early: Duration.zero, late: Duration.zero)
            let ratio = smallestRatios(below: 6) {
                let early = fastest(of: 3) {
                    for _ in 0..<100 { _ = SafeObservation.graph(of: [few]) }
                }
                let late = fastest(of: 3) { _ = SafeObservation.graph(of: [many]) }
                last = (early, late)
                return [late / early]
            }[0]
            expectInChild(
                ratio < 6,
                "graph(of:) costs \(ratio)× per relation with 5,000 what it costs with 50 (last attempt \(describe(last.early)) → \(describe(last.late)) per 5,000 described)"
            )
            withExtendedLifetime((fewListeners, manyListeners)) {}
        }
        #expect(result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } == "")
    }
}
