import Synchronization
import Testing

@testable import SafeObserve

private final class Sender: Sendable {}

/// What Foundation's `NotificationQueue` does, with plain lists: enqueueing
/// removes every queued match from both lists, then appends to its own.
private struct ReferenceQueue {
    struct Queued: Equatable {
        let id: Int
        let name: Int
        let sender: Int?  // an index into the test's senders
    }

    var asap: [Queued] = []
    var idle: [Queued] = []

    static func matches(
        _ queued: Queued, name: Int, sender: Int?, _ coalescing: NotificationHub.Queue.Coalescing
    ) -> Bool {
        guard !coalescing.isEmpty else { return false }
        if coalescing.contains(.onName), queued.name != name { return false }
        if coalescing.contains(.onSender), queued.sender != sender { return false }
        return true
    }

    mutating func removeAll(name: Int, sender: Int?, _ coalescing: NotificationHub.Queue.Coalescing) {
        asap.removeAll { Self.matches($0, name: name, sender: sender, coalescing) }
        idle.removeAll { Self.matches($0, name: name, sender: sender, coalescing) }
    }
}

@Suite("Internal: the notification queue's state machine")
struct NotificationQueueStateMachineTests {
    /// Random enqueues (every style and mask), dequeues and posts against
    /// the reference, long enough for the lines to pass the scan limit (so
    /// that the indexes are built, kept and dropped), with the state's own
    /// invariants checked after every transition.
    @Test(arguments: [1 as UInt64, 2, 3, 4, 5, 6])
    func randomOperations_matchFoundationsRule(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let senders = (0..<12).map { _ in Sender() }
        let posted = Mutex<[Int]>([])
        var state = NotificationHub.Queue.State()
        var reference = ReferenceQueue()
        let masks: [NotificationHub.Queue.Coalescing] = [[], .onName, .onSender, [.onName, .onSender]]
        var nextID = 0
        var longest = 0
        /// Drains `style` by one; compares what comes out.
        func post(_ style: NotificationHub.Queue.PostingStyle, step: Int) {
            let action = state.next(style)
            let expected = style == .asap ? reference.asap.first : reference.idle.first
            guard let entry = action.entry else {
                #expect(
                    expected == nil,
                    "seed \(seed), step \(step): nothing posted, \(String(describing: expected)) expected")
                return
            }
            if style == .asap { reference.asap.removeFirst() } else { reference.idle.removeFirst() }
            entry.post(nil)
            #expect(posted.withLock { $0.last } == expected?.id, "seed \(seed), step \(step)")
        }
        // Phases: grow well past the scan limit, then drain, twice.
        for step in 0..<6_000 {
            let growing = (step / 1_500) % 2 == 0
            let roll = random.next(100)
            if roll < (growing ? 85 : 30) {
                let name = random.next(40)
                let senderIndex = random.next(13)
                let sender: Int? = senderIndex == 12 ? nil : senderIndex
                let styles: [NotificationHub.Queue.PostingStyle] = [.asap, .asap, .whenIdle, .whenIdle, .now]
                let style = styles[random.next(styles.count)]
                // Mostly uncoalesced, so that the lines grow.
                let mask = random.next(10) == 0 ? masks[1 + random.next(3)] : []
                let id = nextID
                nextID += 1
                let entry = NotificationHub.Queue.Entry(
                    nameID: name, sender: sender.map { _UnretainedReference(senders[$0]) }
                ) { _ in posted.withLock { $0.append(id) } }
                let action = state.enqueue(
                    entry, from: sender.map { senders[$0] }, style: style, coalescing: mask)
                reference.removeAll(name: name, sender: sender, mask)
                let queued = ReferenceQueue.Queued(id: id, name: name, sender: sender)
                switch style {
                case .now: #expect(action.postsNow)
                case .asap: reference.asap.append(queued)
                case .whenIdle: reference.idle.append(queued)
                }
            } else if roll < (growing ? 87 : 40) {
                let name = random.next(40)
                let senderIndex = random.next(13)
                let sender: Int? = senderIndex == 12 ? nil : senderIndex
                let mask = masks[1 + random.next(3)]
                _ = state.dequeue(matching: name, sender: sender.map { senders[$0] }, coalescing: mask)
                reference.removeAll(name: name, sender: sender, mask)
            } else {
                post(random.next(2) == 0 ? .asap : .whenIdle, step: step)
            }
            #expect(state.count == reference.asap.count + reference.idle.count, "seed \(seed), step \(step)")
            longest = max(longest, reference.asap.count, reference.idle.count)
        }
        #expect(longest > 2 * NotificationHub.Queue.Indexes.scanLimit, "the indexes were never used")
        while !reference.asap.isEmpty { post(.asap, step: -1) }
        while !reference.idle.isEmpty { post(.whenIdle, step: -1) }
        #expect(state.next(.asap).entry == nil)
        #expect(state.next(.whenIdle).entry == nil)
        #expect(state.count == 0)
        withExtendedLifetime(senders) {}
    }

    @Test func aWaiterResumes_onceWhatWasQueuedBeforeItIsPostedOrRemoved() async {
        var state = NotificationHub.Queue.State()
        func entry(_ name: Int) -> NotificationHub.Queue.Entry {
            NotificationHub.Queue.Entry(nameID: name, sender: nil) { _ in }
        }
        _ = state.enqueue(entry(1), from: nil, style: .asap, coalescing: [])
        _ = state.enqueue(entry(2), from: nil, style: .whenIdle, coalescing: [])
        let resumedByTheState = Atomic<Bool>(false)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            #expect(state.wait(1, isCancelled: false, continuation) == nil, "two are queued")
            _ = state.enqueue(entry(3), from: nil, style: .asap, coalescing: [])  // after the call
            var action = state.next(.asap)
            #expect(action.entry?.nameID == 1 && action.resumes.isEmpty, "1 is being posted")
            action = state.next(.asap)
            #expect(action.entry?.nameID == 3 && action.resumes.isEmpty, "1 was posted; 2 is queued")
            let removed = state.dequeue(matching: 2, sender: nil, coalescing: .onName)
            #expect(removed.released.count == 1)
            #expect(removed.resumes.count == 1, "1 was posted and 2 removed: 3 is not waited for")
            if let waiter = removed.resumes.first {
                resumedByTheState.store(true, ordering: .relaxed)
                waiter.resume()
            } else {
                continuation.resume()  // the test failed; never hang
            }
        }
        let wasResumedByTheState = resumedByTheState.load(ordering: .relaxed)
        #expect(wasResumedByTheState)
        var cancelled = state.next(.asap)
        #expect(cancelled.entry == nil)
        // A waiter that is cancelled is removed, and resumed by the canceller.
        _ = state.enqueue(entry(4), from: nil, style: .asap, coalescing: [])
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            #expect(state.wait(2, isCancelled: false, continuation) == nil)
            let waiter = state.cancelWaiter(2)
            #expect(waiter != nil)
            (waiter ?? continuation).resume()
        }
        cancelled = state.next(.asap)
        #expect(cancelled.resumes.isEmpty, "a cancelled waiter is not resumed twice")
    }
}
