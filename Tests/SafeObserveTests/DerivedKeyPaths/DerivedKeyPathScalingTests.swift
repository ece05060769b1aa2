// What tracking a derived key path's dependencies anew costs, measured in
// one process: per dependency at 2,000 against 20, and with many relations
// elsewhere. Ratios with generous thresholds, never an absolute time.

import Testing

@testable import SafeObserve

private final class Cell: SafeObservable {
    @Observed var value = 1
}

/// Two columns of cells, one of which `total` reads, as `usesSecond` says:
/// each change of `usesSecond` replaces every dependency of `\.total` but
/// that flag.
private final class Sheet: SafeObservable {
    @Observed var usesSecond = false
    let first: [Cell]
    let second: [Cell]

    init(height: Int) {
        first = (0..<height).map { _ in Cell() }
        second = (0..<height).map { _ in Cell() }
    }

    var total: Int { (usesSecond ? second : first).reduce(0) { $0 + $1.value } }
}

@Suite(
    "Derived key paths: cost of tracking dependencies anew", .serialized,
    .disabled(if: StressConfig.isSanitized, "a sanitizer's own costs would be measured, not the library's"))
struct DerivedKeyPathScalingTests {
    /// Re-tracking (O(*d*) in the dependencies): a change that replaces
    /// 2,000 dependencies costs, per dependency, what one that replaces 20
    /// costs (the evaluation that reads them included).
    @Test func reTracking_costsTheSamePerDependency_with2000AsWith20() {
        /// `flips` changes of a sheet of `height` rows, each re-tracking
        /// `2 × height` dependencies (dropped and made).
        func reTracking(_ flips: Int, height: Int) -> Duration {
            let sheet = Sheet(height: height)
            let listener = Listener()
            sheet.safeObserve(\.total, by: listener) { _, _, _ in }
            #expect(
                SafeObservation._channels(of: sheet.first[0]).first?.liveRelations().count == 1,
                "the first column is tracked")
            let duration = fastest(of: 5) {
                for _ in 0..<flips { sheet.usesSecond.toggle() }
            }
            withExtendedLifetime(listener) {}
            return duration
        }
        // 4,000 dependencies re-tracked on each side.
        var last = (early: Duration.zero, late: Duration.zero)
        let ratio = smallestRatios(below: 4) {
            last = (reTracking(100, height: 20), reTracking(1, height: 2_000))
            return [last.late / last.early]
        }[0]
        #expect(
            ratio < 4,
            "re-tracking costs \(ratio)× per dependency with 2,000 what it costs with 20 (last attempt \(describe(last.early)) → \(describe(last.late)) per 4,000)"
        )
    }

    /// Re-tracking (O(*d*)): a change that replaces 16 dependencies costs
    /// what it costs with 20,000 other relations on those dependencies and
    /// 20,000 on other objects.
    @Test func reTracking_doesNotScaleWithOtherRelations() {
        /// 100 changes of `sheet`, each re-tracking 16 dependencies.
        func reTracking(_ sheet: Sheet) -> Duration {
            fastest(of: 5) {
                for _ in 0..<100 { sheet.usesSecond.toggle() }
            }
        }
        /// `count` relations on the sheet's cells (spread over them), and
        /// `count` on other objects.
        func others(_ count: Int, besides sheet: Sheet) -> ([Listener], [Counter]) {
            let cells = sheet.first + sheet.second
            let listeners = (0..<(2 * count)).map { _ in Listener() }
            for (index, other) in listeners[..<count].enumerated() {
                cells[index % cells.count].safeObserve(\.value, by: other) { _, _, _ in }
            }
            let objects = (0..<count).map { _ in Counter() }
            for (object, other) in zip(objects, listeners[count...]) {
                object.safeObserve(\.count, by: other) { _, _, _ in }
            }
            return (listeners, objects)
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on a sheet of its own, so that its cells have no relations of an earlier one.
        let ratio = smallestRatios(below: 4) {
            let sheet = Sheet(height: 8)
            let listener = Listener()
            sheet.safeObserve(\.total, by: listener) { _, _, _ in }
            let few = others(8, besides: sheet)
            let early = reTracking(sheet)
            let many = others(20_000, besides: sheet)
            let late = reTracking(sheet)
            withExtendedLifetime((listener, few, many)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "re-tracking with 40,000 other relations costs \(ratio)× what it costs with 16 (last attempt \(describe(last.early)) → \(describe(last.late)) per 100)"
        )
    }
}
