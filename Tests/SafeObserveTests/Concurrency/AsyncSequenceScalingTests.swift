// What a change costs a sequence of changes, measured in one process: the
// n-th change against early ones, with many changes buffered and many
// other sequences. Ratios with generous thresholds, never an absolute time.

import Testing

@testable import SafeObserve

@Suite(
    "Asynchronous sequences: cost per change", .serialized,
    .disabled(if: StressConfig.isSanitized, "a sanitizer's own costs would be measured, not the library's"))
struct AsyncSequenceScalingTests {
    /// `changes` (O(1) per change): a change made with 20,000 unread
    /// changes buffered reaches the sequence at what the first ones cost.
    @Test func aChange_costsTheSame_with20000ChangesBufferedAsWith8() {
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on an object and a sequence of its own.
        let ratio = smallestRatios(below: 4) {
            let counter = Counter()
            let unread = counter.changes(\.count, options: [.old, .new]).makeAsyncIterator()
            var value = 0
            /// 200 changes, each buffered.
            func changes() -> Duration {
                fastest(of: 5) {
                    for _ in 0..<200 {
                        value += 1
                        counter.count = value
                    }
                }
            }
            for _ in 0..<8 {
                value += 1
                counter.count = value
            }
            let early = changes()  // 8 to 1,008 buffered
            for _ in 0..<20_000 {
                value += 1
                counter.count = value
            }
            let late = changes()  // 21,008 to 22,008 buffered
            withExtendedLifetime(unread) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "a change with 21,000 buffered costs \(ratio)× what it costs with 8 (last attempt \(describe(last.early)) → \(describe(last.late)) per 200)"
        )
    }

    /// `changes` (O(1) per change): reading a change with 20,000 more
    /// buffered behind it costs what reading one of a few does.
    @Test func readingAChange_costsTheSame_with20000BufferedBehindAsWith8() async {
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on an object and a sequence of its own.
        let ratio = await smallestRatios(below: 4) {
            let counter = Counter()
            var changes = counter.changes(\.count).makeAsyncIterator()
            var value = 0
            func change(_ count: Int) {
                for _ in 0..<count {
                    value += 1
                    counter.count = value
                }
            }
            /// The fastest of 5 runs of 200 reads (the changes are buffered first).
            func reads() async -> Duration {
                var best = Duration.seconds(1_000_000)
                for _ in 0..<5 {
                    let start = ContinuousClock.now
                    for _ in 0..<200 { _ = await changes.next() }
                    best = min(best, ContinuousClock.now - start)
                }
                return best
            }
            change(5 * 200 + 8)
            let early = await reads()  // 1,008 to 8 buffered
            change(5 * 200 + 20_000)
            let late = await reads()  // 21,000 to 20,000 buffered
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "reading a change with 20,000 behind it costs \(ratio)× what it costs with 8 (last attempt \(describe(last.early)) → \(describe(last.late)) per 200)"
        )
    }

    /// `values` and `changes` (O(1) per change): a change reaches one
    /// sequence of each at the same cost with 20,000 other sequences, of
    /// other objects and of the object's other property.
    @Test func aChange_doesNotScaleWithOtherSequences() {
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on an object and sequences of its own.
        let ratio = smallestRatios(below: 4) {
            let counter = Counter()
            let values = counter.values(\.count).makeAsyncIterator()
            let changes = counter.changes(\.count).makeAsyncIterator()
            var value = 0
            /// 200 changes, each yielded to both sequences.
            func changing() -> Duration {
                fastest(of: 5) {
                    for _ in 0..<200 {
                        value += 1
                        counter.count = value
                    }
                }
            }
            /// `count` sequences of other objects, and `count` of `title`.
            func others(_ count: Int) -> ([Counter], [ObservedValues<Counter, Int>.AsyncIterator], [Any]) {
                let objects = (0..<count).map { _ in Counter() }
                let iterators = objects.map { $0.values(\.count).makeAsyncIterator() }
                let titles: [Any] = (0..<count).map { _ in counter.changes(\.title).makeAsyncIterator() }
                return (objects, iterators, titles)
            }
            let few = others(8)
            let early = changing()
            let many = others(10_000)
            let late = changing()
            withExtendedLifetime((values, changes, few, many)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "a change with 20,000 other sequences costs \(ratio)× what it costs with 16 (last attempt \(describe(last.early)) → \(describe(last.late)) per 200)"
        )
    }
}
