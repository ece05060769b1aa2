import Synchronization
import Testing

@testable import SafeObserve

/// An element whose lifetime is counted.
private final class Tracked: Sendable {
    let value: Int
    let lifetime: LifetimeCounter

    init(_ value: Int, _ lifetime: LifetimeCounter) {
        self.value = value
        self.lifetime = lifetime
        lifetime.didInit()
    }

    deinit { lifetime.didDeinit() }
}

/// The buffer behind `values`, `changes` and `notifications(named:)`: what
/// `AsyncStream` promised them (order, buffering policies, the end,
/// cancellation), and the lifetimes of what it holds.
@Suite("Internal: the asynchronous sequences' buffer")
struct AsyncBufferTests {
    @Test func elementsAreReadInTheOrderTheyWereYielded_andReleasedOnceRead() async {
        let lifetime = LifetimeCounter()
        let buffer = _AsyncBuffer<Tracked>(buffering: .unbounded)
        for value in 1...100 { buffer.yield(Tracked(value, lifetime)) }
        for value in 1...50 { #expect(await buffer.next(isolation: nil)?.value == value) }
        #expect(lifetime.liveCount == 50, "a read element is still held by the buffer")
        for value in 51...100 { #expect(await buffer.next(isolation: nil)?.value == value) }
        #expect(lifetime.liveCount == 0)
    }

    @Test func bufferingNewest_dropsTheOldest_andReleasesIt() async {
        let lifetime = LifetimeCounter()
        let buffer = _AsyncBuffer<Tracked>(buffering: .bufferingNewest(3))
        for value in 1...10 { buffer.yield(Tracked(value, lifetime)) }
        #expect(lifetime.liveCount == 3, "a dropped element is still held")
        var read: [Int] = []
        for _ in 1...3 { read.append(await buffer.next(isolation: nil)!.value) }
        #expect(read == [8, 9, 10])
    }

    @Test func bufferingOldest_dropsTheNewest_andReleasesIt() async {
        let lifetime = LifetimeCounter()
        let buffer = _AsyncBuffer<Tracked>(buffering: .bufferingOldest(2))
        for value in 1...10 { buffer.yield(Tracked(value, lifetime)) }
        #expect(lifetime.liveCount == 2, "a dropped element is still held")
        #expect(await buffer.next(isolation: nil)?.value == 1)
        #expect(await buffer.next(isolation: nil)?.value == 2)
        buffer.yield(Tracked(11, lifetime))
        #expect(await buffer.next(isolation: nil)?.value == 11)
    }

    @Test(arguments: [0, -5])
    func aLimitOfZeroOrBelow_keepsNothing_butAWaitingConsumerGetsTheElement(limit: Int) async {
        for buffering in [ObservationBuffering.bufferingNewest(limit), .bufferingOldest(limit)] {
            let lifetime = LifetimeCounter()
            let buffer = _AsyncBuffer<Tracked>(buffering: buffering)
            for value in 1...3 { buffer.yield(Tracked(value, lifetime)) }
            #expect(lifetime.liveCount == 0, "\(buffering) kept an element")
            let consumer = Task { await buffer.next(isolation: nil)?.value }
            try? await Task.sleep(for: .milliseconds(10))
            buffer.yield(Tracked(4, lifetime))
            #expect(await consumer.value == 4, "\(buffering): a waiting consumer was not handed the element")
        }
    }

    @Test func afterTheEnd_whatIsBufferedIsRead_thenNil_andLaterYieldsAreReleased() async {
        let lifetime = LifetimeCounter()
        let buffer = _AsyncBuffer<Tracked>(buffering: .unbounded)
        buffer.yield(Tracked(1, lifetime))
        buffer.finish()
        buffer.yield(Tracked(2, lifetime))
        #expect(lifetime.liveCount == 1, "a yield after the end is kept")
        #expect(await buffer.next(isolation: nil)?.value == 1)
        #expect(await buffer.next(isolation: nil) == nil)
        #expect(await buffer.next(isolation: nil) == nil, "the sequence goes on after its end")
    }

    @Test func finishingDiscardingBuffered_releasesItAtOnce() async {
        let lifetime = LifetimeCounter()
        let buffer = _AsyncBuffer<Tracked>(buffering: .unbounded)
        for value in 1...3 { buffer.yield(Tracked(value, lifetime)) }
        buffer.finish(discardingBuffered: true)
        #expect(lifetime.liveCount == 0)
        #expect(await buffer.next(isolation: nil) == nil)
    }

    @Test func theTerminationHandler_runsOnce_evenIfFiledAfterTheEnd() {
        let calls = Atomic<Int>(0)
        let buffer = _AsyncBuffer<Int>(buffering: .unbounded)
        buffer.onTermination { calls.add(1, ordering: .relaxed) }
        buffer.finish()
        buffer.finish()
        #expect(calls.load(ordering: .relaxed) == 1)
        let late = Atomic<Int>(0)
        buffer.onTermination { late.add(1, ordering: .relaxed) }
        #expect(late.load(ordering: .relaxed) == 1, "a handler filed after the end never ran")
    }

    @Test func aWaitingConsumer_isResumedByAYield_orByTheEnd() async {
        let buffer = _AsyncBuffer<Int>(buffering: .unbounded)
        let consumer = Task { await buffer.next(isolation: nil) }
        await Task.yield()
        buffer.yield(7)
        #expect(await consumer.value == 7)
        let second = Task { await buffer.next(isolation: nil) }
        await Task.yield()
        buffer.finish()
        #expect(await second.value == nil)
    }

    @Test func cancellingTheWaitingConsumer_endsTheSequence_andRunsTheHandlerOnce() async {
        let calls = Atomic<Int>(0)
        let buffer = _AsyncBuffer<Int>(buffering: .unbounded)
        buffer.onTermination { calls.add(1, ordering: .relaxed) }
        let consumer = Task { await buffer.next(isolation: nil) }
        try? await Task.sleep(for: .milliseconds(10))
        consumer.cancel()
        #expect(await consumer.value == nil)
        #expect(calls.load(ordering: .relaxed) == 1)
        buffer.yield(1)
        #expect(await buffer.next(isolation: nil) == nil, "a yield after the cancellation was buffered")
    }

    @Test func aConsumerWhoseTaskWasCancelledBefore_getsNil_whenNothingIsBuffered() async {
        let buffer = _AsyncBuffer<Int>(buffering: .unbounded)
        let consumer = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await buffer.next(isolation: nil)
        }
        #expect(await consumer.value == nil)
    }

    /// A copied iterator may call `next()` from a second task while the
    /// first waits: it is told `nil` at once, and the first still gets the
    /// next element (never a task suspended for ever).
    @Test func aSecondWaitingConsumer_getsNil_andTheFirstStillGetsTheElement() async {
        let buffer = _AsyncBuffer<Int>(buffering: .unbounded)
        let first = Task { await buffer.next(isolation: nil) }
        try? await Task.sleep(for: .milliseconds(10))
        let second = Task { await buffer.next(isolation: nil) }
        #expect(await second.value == nil)
        buffer.yield(1)
        #expect(await first.value == 1)
    }

    /// Producers on other threads and one consumer, looped: every element
    /// arrives once, each producer's in its order (run under TSan in CI).
    @Test func producersOnOtherThreads_andOneConsumer_loseNothing() async {
        for _ in 0..<20 {
            let buffer = _AsyncBuffer<Int>(buffering: .unbounded)
            let producers = 2
            let perProducer = 2_000
            let consumer = Task {
                var next = [Int](repeating: 0, count: producers)
                var inOrder = true
                for _ in 0..<(producers * perProducer) {
                    guard let element = await buffer.next(isolation: nil) else { return false }
                    inOrder = inOrder && element % perProducer == next[element / perProducer]
                    next[element / perProducer] += 1
                }
                return inOrder
            }
            await stressRunConcurrentlyOffThePool(
                (0..<producers).map { producer in
                    { for index in 0..<perProducer { buffer.yield(producer * perProducer + index) } }
                })
            #expect(await consumer.value, "an element was lost, or a producer's arrived out of order")
        }
    }

    /// Reading the n-th buffered element costs what reading an early one
    /// does (the storage is compacted, never shifted per read).
    @Test func readingDeepInALongBuffer_doesNotScaleWithItsLength() async {
        func cost(buffered: Int) async -> Duration {
            let buffer = _AsyncBuffer<Int>(buffering: .unbounded)
            for value in 0..<buffered { buffer.yield(value) }
            let clock = ContinuousClock()
            var best = Duration.seconds(1_000)
            for _ in 0..<5 {
                let start = clock.now
                for value in 0..<1_000 {
                    buffer.yield(value)
                    _ = await buffer.next(isolation: nil)
                }
                best = min(best, clock.now - start)
            }
            return best
        }
        let ratio = await smallestRatios(below: 4) {
            let early = await cost(buffered: 100)
            let late = await cost(buffered: 100_000)
            return [late / early]
        }[0]
        #expect(ratio < 4, "1,000 reads cost \(ratio)× as much with 100,000 buffered as with 100")
    }
}
