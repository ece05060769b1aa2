import Dispatch
import Testing

@testable import SafeObserve

/// Eight observed properties.
// @unchecked Sendable: each instance is created, observed and released on
// one thread; other threads only read SafeObserve's bookkeeping about it.
private final class Octet: SafeObservable, @unchecked Sendable {
    @Observed var p0 = 0
    @Observed var p1 = 0
    @Observed var p2 = 0
    @Observed var p3 = 0
    @Observed var p4 = 0
    @Observed var p5 = 0
    @Observed var p6 = 0
    @Observed var p7 = 0
}

private final class Plain: Sendable {}

@Suite("SafeObservation.relations(of:) under churn", .serialized)
struct RelationsOrderUnderChurnTests {
    /// Objects whose properties were observed in a known order, read while
    /// other threads create and destroy observed objects (the process-wide
    /// index of observed properties grows, shrinks and rehashes meanwhile).
    @Test func relationsOfAnObject_stayInFirstObservationOrder_whileOtherObjectsComeAndGo() {
        let listener = Plain()
        let watched = (0..<64).map { _ in Octet() }
        let order: [AnyKeyPath?] = [
            \Octet.p0, \Octet.p1, \Octet.p2, \Octet.p3, \Octet.p4, \Octet.p5, \Octet.p6, \Octet.p7,
        ]
        for object in watched {
            object.safeObserve(\.p0, by: listener) { _, _, _ in }
            object.safeObserve(\.p1, by: listener) { _, _, _ in }
            object.safeObserve(\.p2, by: listener) { _, _, _ in }
            object.safeObserve(\.p3, by: listener) { _, _, _ in }
            object.safeObserve(\.p4, by: listener) { _, _, _ in }
            object.safeObserve(\.p5, by: listener) { _, _, _ in }
            object.safeObserve(\.p6, by: listener) { _, _, _ in }
            object.safeObserve(\.p7, by: listener) { _, _, _ in }
        }
        let stop = Flag()
        let churners = DispatchGroup()
        for thread in 0..<2 {
            DispatchQueue.global().async(group: churners) {
                let sink = Plain()
                var round = 0
                while !stop.isSet {
                    round += 1
                    // A few hundred, then thousands: the index grows and shrinks.
                    let count = round % 4 == 0 ? 3_000 : 200 + 50 * thread
                    var others = (0..<count).map { _ in Octet() }
                    for other in others { other.safeObserve(\.p0, by: sink) { _, _, _ in } }
                    others.removeAll()
                }
            }
        }
        func firstOutOfOrder(_ read: Int) -> String? {
            for object in watched {
                let keyPaths = SafeObservation.relations(of: object).map(\.keyPath)
                if keyPaths != order {
                    return "read \(read): \(keyPaths.map { $0.map { "\($0)" } ?? "nil" })"
                }
            }
            return nil
        }
        let deadline = ContinuousClock.now + .seconds(StressConfig.isSanitized ? 8 : 4)
        var firstWrong: String?
        var read = 0
        let sink = Plain()
        while firstWrong == nil, ContinuousClock.now < deadline {
            // This thread churns too (so the test does not depend on how
            // much time the other threads get).
            read += 1
            var others = (0..<(read % 3 == 0 ? 2_000 : 100)).map { _ in Octet() }
            for other in others { other.safeObserve(\.p1, by: sink) { _, _, _ in } }
            firstWrong = firstOutOfOrder(read)
            others.removeAll()
            if firstWrong == nil { firstWrong = firstOutOfOrder(read) }
        }
        stop.set()
        #expect(churners.wait(timeout: .now() + 30) == .success, "the churning threads did not stop")
        #expect(firstWrong == nil, "relations(of:) out of first-observation order: \(firstWrong ?? "")")
        withExtendedLifetime((watched, listener)) {}
    }
}
