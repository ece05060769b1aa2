import Synchronization
import Testing

@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#endif

private final class Node: SafeObservable {
    @Observed var count = 0
    @Observed var child: Node? = nil
    let lifetime: LifetimeCounter?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }

    deinit { lifetime?.didDeinit() }
}

/// Changes as asynchronous sequences: `values` and `changes`.
@Suite("Asynchronous sequences of changes")
struct AsyncSequenceTests {
    @Test func values_yieldTheCurrentValueFirst_thenEachNewValue() async {
        let node = Node()
        node.count = 3
        var values = node.values(\.count).makeAsyncIterator()
        #expect(await values.next() == 3)
        node.count = 4
        #expect(await values.next() == 4)
        node.count = 5
        #expect(await values.next() == 5)
    }

    @Test func changes_carryWhatTheOptionsAsk_andNoInitialUnlessAsked() async {
        let node = Node()
        var changes = node.changes(\.count, options: [.old, .new]).makeAsyncIterator()
        node.count = 1
        node.count = 2
        let first = await changes.next()
        let second = await changes.next()
        #expect(first?.oldValue == 0 && first?.newValue == 1 && first?.isInitial == false)
        #expect(second?.oldValue == 1 && second?.newValue == 2)
    }

    @Test func derivedKeyPaths_yieldTheirValues() async {
        let node = Node()
        var values = node.values(\.child?.count).makeAsyncIterator()
        #expect(await values.next() == .some(nil))
        let child = Node()
        node.child = child
        #expect(await values.next() == .some(0))
        child.count = 7
        #expect(await values.next() == .some(7))
        node.child = nil
        #expect(await values.next() == .some(nil))
    }

    @Test func theSequenceFinishes_whenTheObjectDies_andNeverKeptItAlive() async {
        let lifetime = LifetimeCounter()
        var node: Node? = Node(lifetime: lifetime)
        weak var weakNode: Node?
        weakNode = node
        var values = node!.values(\.count).makeAsyncIterator()
        #expect(await values.next() == 0)
        node = nil
        #expect(weakNode == nil, "iterating kept the object alive")
        #expect(await values.next() == nil)
        #expect(lifetime.liveCount == 0)
    }

    @Test func aSequenceOfAnObjectThatDiedBeforeIteration_isEmpty() async {
        var node: Node? = Node()
        let sequence = node!.values(\.count)
        node = nil
        var values = sequence.makeAsyncIterator()
        #expect(await values.next() == nil)
    }

    @Test func cancellingTheConsumingTask_endsTheRelationAtOnce() async {
        let node = Node()
        let started = EventLog()
        let task = Task {
            for await value in node.values(\.count) { started.record("\(value)") }
        }
        #expect(await eventually { !started.entries.isEmpty })
        #expect(SafeObservation.relations(of: node).count == 1)
        task.cancel()
        await task.value
        #expect(SafeObservation.relations(of: node).isEmpty)
    }

    /// A task cancelled before its first `next()` is told nothing made
    /// after the cancellation (round 5, E1): the task that made the iterator
    /// is its consumer from the start.
    @Test func aTaskCancelledBeforeItsFirstNext_isToldNothingMadeAfter() async {
        let node = Node()
        let consumer = Task.detached { () -> Int?? in
            var changes = node.changes(\.count).makeAsyncIterator()
            while !Task.isCancelled { await Task.yield() }
            node.count = 1
            return await changes.next()?.newValue
        }
        consumer.cancel()
        #expect(await consumer.value == nil, "a change made after the cancellation was delivered")
        #expect(SafeObservation.relations(of: node).isEmpty)
    }

    /// ObservationBuffering: a limit of 0 keeps nothing (round 5, E4): a
    /// change reaches only a consumer already waiting.
    @Test(arguments: [ObservationBuffering.bufferingNewest(0), .bufferingOldest(0), .bufferingNewest(-3)])
    func aLimitOfZero_keepsNothing_butAWaitingConsumerIsTold(buffering: ObservationBuffering) async {
        let node = Node()
        var changes = node.changes(\.count, buffering: buffering).makeAsyncIterator()
        node.count = 1  // nobody waits: dropped
        let waiting = Task { [node] in
            try? await Task.sleep(for: .milliseconds(20))
            node.count = 2
        }
        #expect(await changes.next()?.newValue == 2)
        await waiting.value
    }

    @Test func anIteratorDroppedWithoutCancellation_endsItsRelation() async {
        let node = Node()
        do {
            var values = node.values(\.count).makeAsyncIterator()
            #expect(await values.next() == 0)
            #expect(SafeObservation.relations(of: node).count == 1)
        }
        #expect(SafeObservation.relations(of: node).isEmpty)
    }

    @Test func aSlowConsumer_ofValues_seesTheLatestValue_withBoundedMemory() async {
        let node = Node()
        var values = node.values(\.count).makeAsyncIterator()
        for value in 1...10_000 { node.count = value }
        #expect(await values.next() == 10_000, "older unread values are dropped")
        node.count = 10_001
        #expect(await values.next() == 10_001)
    }

    @Test func changes_keepEveryChange_unlessToldOtherwise() async {
        let node = Node()
        var every = node.changes(\.count).makeAsyncIterator()
        var oldest = node.changes(\.count, buffering: .bufferingOldest(2)).makeAsyncIterator()
        for value in 1...5 { node.count = value }
        var seen: [Int] = []
        for _ in 1...5 { seen.append(await every.next()!.newValue!) }
        #expect(seen == [1, 2, 3, 4, 5])
        #expect(await oldest.next()?.newValue == 1)
        #expect(await oldest.next()?.newValue == 2)
        node.count = 6
        #expect(await oldest.next()?.newValue == 6)
    }

    @Test func changesMadeOnOtherThreads_areYielded_inTheOrderTheyWereMade() async {
        let node = Node()
        var changes = node.changes(\.count).makeAsyncIterator()
        await Task.detached { [node] in
            for value in 1...100 { node.count = value }
        }.value
        var seen: [Int] = []
        for _ in 1...100 { seen.append(await changes.next()!.newValue!) }
        #expect(seen == Array(1...100))
    }

    @Test func tenThousandSequencesCreatedAndCancelled_leaveNoRelationBehind() async {
        let node = Node()
        for _ in 0..<10_000 {
            let task = Task { for await _ in node.values(\.count) {} }
            task.cancel()
            await task.value
        }
        #expect(await eventually { SafeObservation.relations(of: node).isEmpty })
    }

    /// A consuming task cancelled while its loop body awaits something else
    /// calls no `next()`: the relation ends at the first change after the
    /// cancellation, and nothing made after it is buffered or delivered.
    @Test(arguments: [false, true])
    func aConsumerCancelledWhileItsBodyAwaitsElsewhere_endsAtTheNextChange_andBuffersNothing(values: Bool) async {
        let node = Node()
        let received = EventLog()
        let inBody = Flag()
        let parked = _Mutex<CheckedContinuation<Void, Never>?>(nil)
        let consumer = Task {
            var hasWaited = false
            func park() async {
                guard !hasWaited else { return }
                hasWaited = true
                // Something else, which ignores cancellation.
                await withCheckedContinuation { continuation in
                    parked.withLock { $0 = continuation }
                    inBody.set()
                }
            }
            if values {
                for await value in node.values(\.count) where value > 0 {
                    received.record("\(value)")
                    await park()
                }
            } else {
                for await change in node.changes(\.count) {
                    received.record("\(change.newValue!)")
                    await park()
                }
            }
        }
        #expect(await eventually { !SafeObservation.relations(of: node).isEmpty })
        node.count = 1
        #expect(await eventually { inBody.isSet }, "the first change never reached the loop body")
        consumer.cancel()
        #expect(!SafeObservation.relations(of: node).isEmpty, "nothing happened yet that could end it")
        node.count = 2  // the first change after the cancellation
        #expect(SafeObservation.relations(of: node).isEmpty, "the change after the cancellation did not end it")
        for value in 3...100 { node.count = value }
        parked.withLock { $0?.resume() }
        await consumer.value
        #expect(received.entries == ["1"], "changes made after the cancellation reached the loop")
    }

    /// ObservingFromActorsAndAsyncCode.md: a consumer cancelled while its
    /// loop body awaits something else ends its relation when the body
    /// returns to the loop, with no change made meanwhile (the loop's
    /// `next()` notices the cancellation).
    @Test(arguments: [true, false])
    func aConsumerCancelledWhileItsBodyAwaitsElsewhere_endsWhenTheBodyReturnsToTheLoop(values: Bool) async {
        let node = Node()
        let inBody = Flag()
        let parked = _Mutex<CheckedContinuation<Void, Never>?>(nil)
        let consumer = Task {
            var hasWaited = false
            func park() async {
                guard !hasWaited else { return }
                hasWaited = true
                // Something else, which ignores cancellation.
                await withCheckedContinuation { continuation in
                    parked.withLock { $0 = continuation }
                    inBody.set()
                }
            }
            if values {
                for await value in node.values(\.count) where value > 0 { await park() }
            } else {
                for await _ in node.changes(\.count) { await park() }
            }
        }
        #expect(await eventually { !SafeObservation.relations(of: node).isEmpty })
        node.count = 1
        #expect(await eventually { inBody.isSet }, "the first change never reached the loop body")
        consumer.cancel()
        #expect(!SafeObservation.relations(of: node).isEmpty, "nothing happened yet that could end it")
        parked.withLock { $0?.resume() }  // the body returns to the loop; no change is made
        let ended = await eventually { SafeObservation.relations(of: node).isEmpty }
        #expect(ended, "the body returned to the loop, and the relation did not end")
        if !ended { node.count = 2 }  // the first change after the cancellation ends it: let the consumer go
        await consumer.value
    }
}

// Node is only touched by one task at a time in these tests.
extension Node: @unchecked Sendable {}
