import Testing

@testable import SafeObserve

/// After a peak, SafeObserve's own state returns to what the live relations
/// need, whichever side dies first, with no later registration to trigger a
/// sweep. (The proxy table is process-wide and other suites use it in
/// parallel, so the tests count their own entries and check the table's load,
/// never its total size.)
@Suite("Bounded state after a peak", .serialized)
struct BoundedStateTests {
    static let peak = 4_000
    static let margin = peak / 10

    enum Order: CaseIterable { case listenersFirst, objectFirst }

    @Test(arguments: Order.allCases)
    func plainListenersOfADeadObject_leaveNoProxyBehind_andTheTableShrinks(order: Order) {
        let lifetime = LifetimeCounter()
        var object: Counter? = Counter()
        var listeners: [Listener]? = (0..<Self.peak).map { _ in Listener(lifetime: lifetime) }
        let ids = listeners!.map(ObjectIdentifier.init)
        for listener in listeners! {
            object!.safeObserve(\.count, by: listener) { _, _, _ in }
        }
        #expect(_ProxyTable.entries(for: ids) == Self.peak, "the peak never happened")
        switch order {
        case .listenersFirst:
            listeners = nil
            object = nil
        case .objectFirst:
            object = nil
            listeners = nil
        }
        #expect(lifetime.liveCount == 0)
        // Only this test's entries are counted (other suites use the table in
        // parallel); an address freed meanwhile may be reused by theirs.
        #expect(_ProxyTable.entries(for: ids) <= Self.margin, "proxies of listeners whose relations ended were kept")
        // After removals the table's load stays above 1/8 (it kept its peak
        // capacity, 8,192 slots, before).
        let (capacity, count) = _ProxyTable.capacityAndCount
        #expect(capacity <= max(16, 8 * (count + 1)), "the proxy table kept \(capacity) slots for \(count) entries")
    }

    @Test func aListenerWhoseProxyWasRetired_observesAgainWithANewOne() {
        let listener = Listener()
        var object: Counter? = Counter()
        object!.safeObserve(\.count, by: listener) { _, _, _ in }
        object = nil  // the listener's proxy is retired
        let other = Counter()
        let token = other.safeObserve(\.count, by: listener) { listener, _, change in
            listener.record("\(change.newValue!)")
        }
        other.count = 1
        #expect(token.isActive)
        #expect(listener.log == ["1"])
        #expect(SafeObservation.relations(observedBy: listener) == [token])
    }

    @Test func aChannelGivesItsStorageBack_afterItsRelationsEnded() {
        let object = Counter()
        let listener = Listener()
        let tokens = (0..<2_000).map { index in
            object.safeObserve(\.count, by: Listener()) { _, _, _ in }
        }
        let kept = object.safeObserve(\.count, by: listener) { listener, _, _ in listener.record("kept") }
        for token in tokens { token.invalidate() }
        let channel = SafeObservation._channels(of: object).first
        let capacity = channel?.state.withLock { $0.relations.capacity } ?? 0
        #expect(capacity <= 64, "a channel with one live relation kept \(capacity) slots")
        object.count = 1
        #expect(listener.log == ["kept"])
        #expect(kept.isActive)
    }
}
