import Synchronization
import Testing

@testable import SafeObserve

/// Semantics 4: anything may happen inside a handler.
@Suite("Re-entrancy inside handlers")
struct ReentrancyTests {
    @Test func unobservingInsideTheInitialCallback_stopsEveryLaterDelivery() {
        let counter = Counter()
        let listener = Listener()
        let log = EventLog()
        let token = counter.safeObserve(\.count, by: listener, options: [.initial, .new]) { listener, counter, change in
            log.record(describe(change))
            counter.safeUnobserve(\.count, by: listener)
        }
        counter.count = 1
        #expect(log.entries == ["nil->0 initial"])
        #expect(!token.isActive)
    }

    @Test func invalidatingTheTokenInsideTheInitialCallback_stopsEveryLaterDelivery() {
        let counter = Counter()
        let listener = Listener()
        let log = EventLog()
        counter.safeObserve(\.count, by: listener, options: [.initial]) { listener, _, _ in
            log.record("initial")
            SafeObservation.removeAll(observedBy: listener)
        }
        counter.count = 1
        #expect(log.entries == ["initial"])
    }

    @Test func aRelationRemovedByAnEarlierHandler_isNotCalledForTheSameChange() {
        let counter = Counter()
        let first = Listener()
        let second = Peer()
        let log = EventLog()
        counter.safeObserve(\.count, by: first) { [weak second] _, counter, _ in
            log.record("first")
            if let second { counter.safeUnobserve(\.count, by: second) }
        }
        counter.safeObserve(\.count, by: second) { _, _, _ in log.record("second") }
        counter.count = 1
        counter.count = 2
        #expect(log.entries == ["first", "first"])
    }

    @Test func priorHandlerRemovingItsOwnRelation_getsNoChangeDelivery() {
        let counter = Counter()
        let listener = Listener()
        let log = EventLog()
        let token = counter.safeObserve(\.count, by: listener, options: [.prior, .new]) { _, counter, change in
            log.record(describe(change))
            if change.isPrior { SafeObservation.removeAll(observedBy: counter) }
        }
        _ = token
        counter.safeObserve(\.count, by: counter, options: [.prior]) { _, _, _ in }
        // Remove the relation from inside its own prior delivery.
        let listener2 = Listener()
        counter.safeObserve(\.count, by: listener2, options: [.prior, .new]) { listener2, counter, change in
            log.record("2 " + describe(change))
            if change.isPrior { counter.safeUnobserve(by: listener2) }
        }
        counter.count = 1
        #expect(log.entries == ["nil->nil prior", "2 nil->nil prior", "nil->1"])
    }

    @Test func observingInsideAHandler_registersForLaterChangesOnly() {
        let counter = Counter()
        let listener = Listener()
        let late = Peer()
        let log = EventLog()
        counter.safeObserve(\.count, by: listener) { [weak late] _, counter, _ in
            log.record("outer")
            guard let late else { return }
            counter.safeObserve(\.count, by: late, options: [.initial, .new]) { _, _, change in
                log.record("inner \(describe(change))")
            }
        }
        counter.count = 1
        counter.count = 2
        #expect(log.entries == ["outer", "inner nil->1 initial", "outer", "inner nil->2"])
    }

    @Test func mutatingTheObservedPropertyInsideItsOwnHandler_deliversTheNestedChange() {
        let counter = Counter()
        let listener = Listener()
        let log = EventLog()
        counter.safeObserve(\.count, by: listener, options: [.old, .new]) { _, counter, change in
            log.record(describe(change))
            if change.newValue! < 3 { counter.count += 1 }
        }
        counter.count = 1
        #expect(counter.count == 3)
        #expect(log.entries == ["0->1", "1->2", "2->3"])
    }

    @Test func mutatingAnotherPropertyInsideAHandler_works() {
        let counter = Counter()
        let listener = Listener()
        let log = EventLog()
        counter.safeObserve(\.count, by: listener) { _, counter, change in counter.title = "count \(change.newValue!)" }
        counter.safeObserve(\.title, by: listener) { _, _, change in log.record(change.newValue!) }
        counter.count = 5
        #expect(log.entries == ["count 5"])
    }

    @Test func releasingTheListenerInsideItsHandler_deliversNothingAfterwards() {
        // @unchecked Sendable: touched only on the test's own thread.
        final class Holder: @unchecked Sendable {
            var listener: OptInListener?
        }
        let counter = Counter()
        let holder = Holder()
        let listeners = LifetimeCounter()
        let log = EventLog()
        holder.listener = OptInListener(lifetime: listeners)
        counter.safeObserve(\.count, by: holder.listener!) { _, _, change in
            log.record("\(change.newValue!)")
            holder.listener = nil  // still alive until this handler returns
        }
        counter.count = 1
        #expect(listeners.liveCount == 0, "Listener leaked")
        counter.count = 2
        #expect(log.entries == ["1"])
    }

    @Test func releasingTheObservedObjectInsideAHandler_isSafe() {
        // @unchecked Sendable: touched only on the test's own thread.
        final class Holder: @unchecked Sendable {
            var counter: Counter?
        }
        let holder = Holder()
        let counters = LifetimeCounter()
        let listener = Listener()
        let log = EventLog()
        holder.counter = Counter(lifetime: counters)
        holder.counter!.safeObserve(\.count, by: listener) { _, _, _ in
            log.record("a")
            holder.counter = nil
        }
        let other = Listener()
        holder.counter!.safeObserve(\.count, by: other, options: [.old]) { _, counter, _ in
            log.record("b \(counter.count)")
        }
        holder.counter!.count = 1
        #expect(counters.liveCount == 0, "Observed object leaked")
        #expect(log.entries == ["a", "b 1"], "the change being delivered completes")
        #expect(SafeObservation.relations(observedBy: other).isEmpty)
        #expect(SafeObservation.relations(observedBy: listener).isEmpty)
    }

    @Test func invalidatingEveryTokenInsideAHandler_isSafe() {
        let counter = Counter()
        let listeners = (0..<10).map { _ in Listener() }
        let log = EventLog()
        let tokens = TokenBox()
        for (index, listener) in listeners.enumerated() {
            tokens.append(
                counter.safeObserve(\.count, by: listener) { _, _, _ in
                    log.record("\(index)")
                    tokens.invalidateAll()
                })
        }
        counter.count = 1
        counter.count = 2
        #expect(log.entries == ["0"])
    }
}

/// Tokens a handler may reach.
private final class TokenBox: Sendable {
    private let tokens = _Mutex<[ObservationToken]>([])
    func append(_ token: ObservationToken) { tokens.withLock { $0.append(token) } }
    func invalidateAll() {
        for token in tokens.withLock({ $0 }) { token.invalidate() }
    }
}
