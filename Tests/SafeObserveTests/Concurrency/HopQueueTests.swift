import Synchronization
import Testing

@testable import SafeObserve

/// The hop's queue as a state machine, driven through the interleavings a
/// registration's `.initial` can meet on other threads (a prior queued
/// before its read, a change numbered after it) that no public hook can
/// hold still. Each test states what the relation is then told.
@Suite struct HopQueueTests {
    private typealias Queue = _Hop<Peer, Peer, Int>.Queue

    /// A queue not attached yet: changes are kept unfiled, with no mailbox job.
    private final class Harness {
        var queue = Queue()
        var mailbox = _Mailbox.State()
        let hasPending = Atomic<Bool>(false)
        let hop = _AnyHop { _, _, _ in }
        let object = Peer()
        let coalescing: Bool

        init(coalescing: Bool = false) { self.coalescing = coalescing }

        func prior(old: Int) {
            _ = enqueue(ObservedChange(newValue: nil, oldValue: old, isPrior: true))
        }

        func change(_ old: Int, _ new: Int, sequence: UInt64) {
            _ = enqueue(ObservedChange(newValue: new, oldValue: old), sequence: sequence)
        }

        private func enqueue(_ change: ObservedChange<Int>, sequence: UInt64 = 0) -> Bool {
            let result = queue.enqueue(
                change, sequence: sequence, coalescing: coalescing, tellsOld: true,
                object: Unmanaged.passUnretained(object).toOpaque(), hop: hop, mailbox: &mailbox,
                hasPending: hasPending)
            return result.replaced == nil
        }

        /// The `.initial` of a relation: `value` read after the `queuedBefore`
        /// changes queued first, numbered `stored`; `unsure` when a mutation
        /// was under way during the read.
        func initial(_ value: Int, queuedBefore: Int, stored: UInt64, unsure: Bool) {
            _ = queue.dropSuperseded(
                first: queuedBefore, through: stored, by: value, unsure: unsure, hasPending: hasPending)
            if unsure { queue.keepBaseline(value, tellsOld: true, hasPending: hasPending) }
        }

        /// What the relation is told after its `.initial`, in order.
        var told: [String] {
            queue.items[queue.head...].compactMap { $0 }.map { item in
                let change = item.change
                let old = change.oldValue.map(String.init) ?? "-"
                if change.isPrior { return "prior \(old)" }
                return "\(old)→\(change.newValue.map(String.init) ?? "-")"
            }
        }
    }

    /// A prior queued before the `.initial`'s read, whose change is stored
    /// after it (numbered after the `.initial`, and queued before it drops
    /// what it supersedes), goes with its change: the relation is told both
    /// (attack round 10, F5: the prior fell under the count of changes the
    /// read includes, and its change came alone).
    @Test func aPriorQueuedBeforeTheRead_ofAChangeStoredAfterIt_isTold() {
        let harness = Harness()
        harness.prior(old: 0)
        harness.change(0, 1, sequence: 2)
        harness.initial(0, queuedBefore: 1, stored: 1, unsure: false)
        #expect(harness.told == ["prior 0", "0→1"])
    }

    /// The same prior, its change stored before the read: both are
    /// superseded by the `.initial`, which told the new value.
    @Test func aPriorQueuedBeforeTheRead_ofAChangeNumberedBeforeIt_goesWithIt() {
        let harness = Harness()
        harness.prior(old: 0)
        harness.change(0, 1, sequence: 1)
        harness.initial(1, queuedBefore: 1, stored: 2, unsure: false)
        #expect(harness.told == [])
    }

    /// While the read may have seen a store numbered after it (a mutation
    /// was under way), the last prior queued, whose change is still to
    /// come, is held: told with its change if that change brings another
    /// value, dropped with it if the `.initial` told that value.
    @Test(arguments: [false, true])
    func aTrailingPrior_whileUnsure_goesWithItsChange(readSawTheStore: Bool) {
        let harness = Harness()
        harness.prior(old: 0)
        harness.initial(readSawTheStore ? 1 : 0, queuedBefore: 1, stored: 1, unsure: true)
        harness.change(0, 1, sequence: 2)
        #expect(harness.told == (readSawTheStore ? [] : ["prior 0", "0→1"]))
        harness.prior(old: 1)
        harness.change(1, 2, sequence: 3)
        #expect(harness.told.suffix(2) == ["prior 1", "1→2"])
    }

    /// With `.coalesced`, a prior dropped for a change that was waiting,
    /// then superseded by the `.initial`, is not told again in front of a
    /// later change that comes with its own prior (attack round 10, F5: a
    /// prior told twice).
    @Test func aCoalescedPriorAwaitingASupersededChange_isNotToldTwice() {
        let harness = Harness(coalescing: true)
        harness.change(0, 1, sequence: 1)  // waiting
        harness.prior(old: 1)  // dropped: the waiting change's prior stands for both
        harness.initial(2, queuedBefore: 1, stored: 1, unsure: true)  // the read saw 2 stored
        harness.change(1, 2, sequence: 2)  // told by the `.initial`: dropped
        harness.prior(old: 2)
        harness.change(2, 3, sequence: 3)
        #expect(harness.told == ["prior 2", "2→3"])
    }

    /// Queued changes that bring the `.initial`'s value are compared by
    /// bits, never with `==` (user code, under the queue's lock): an equal
    /// value with other bits is told, chained from the `.initial`.
    @Test func aQueuedChangeEqualToTheInitial_isComparedByBitsNotEquality() {
        final class Spy: Equatable {
            static let comparisons = Atomic<Int>(0)
            static func == (lhs: Spy, rhs: Spy) -> Bool {
                comparisons.add(1, ordering: .relaxed)
                return true
            }
        }
        var queue = _Hop<Peer, Peer, Spy>.Queue()
        var mailbox = _Mailbox.State()
        let hasPending = Atomic<Bool>(false)
        let hop = _AnyHop { _, _, _ in }
        let object = Peer()
        let (old, new, read) = (Spy(), Spy(), Spy())
        _ = queue.enqueue(
            ObservedChange(newValue: new, oldValue: old), sequence: 2, coalescing: false, tellsOld: true,
            object: Unmanaged.passUnretained(object).toOpaque(), hop: hop, mailbox: &mailbox, hasPending: hasPending)
        let dropped = queue.dropSuperseded(first: 0, through: 1, by: read, unsure: false, hasPending: hasPending)
        #expect(dropped.isEmpty)
        #expect(Spy.comparisons.load(ordering: .relaxed) == 0)
        _ = queue.dropSuperseded(first: 0, through: 1, by: new, unsure: false, hasPending: hasPending)
        #expect(queue.isEmpty, "a change that brings the value told, bit for bit, is superseded")
    }
}
