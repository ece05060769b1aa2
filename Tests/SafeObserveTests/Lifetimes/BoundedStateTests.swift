import Dispatch
import Synchronization
import Testing

@testable import SafeObserve

/// After a peak, SafeObserve's own state returns to what the live relations
/// need, whichever side dies first, with no later registration to trigger a
/// sweep.
///
/// The proxy table is process-wide, so the tests that measure it run in a
/// process of their own (an exit test): suites running in parallel would
/// otherwise add and remove entries of their own meanwhile, and exact bounds
/// could only be loosened ones.
@Suite("Bounded state after a peak")
struct BoundedStateTests {
    @Test func plainListenersDyingBeforeTheirObject_leaveNoProxyBehind_andTheTableShrinks() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            BoundedStateTests.peakThenDeaths(listenersFirst: true)
        }
        #expect(result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } == "")
    }

    @Test func plainListenersOutlivingTheirObject_leaveNoProxyBehind_andTheTableShrinks() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            BoundedStateTests.peakThenDeaths(listenersFirst: false)
        }
        #expect(result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } == "")
    }

    /// 20,000 plain listeners observe one object, then both sides die in the
    /// given order. Runs in the exit test's process, which nothing else uses.
    static func peakThenDeaths(listenersFirst: Bool) {
        let peak = 20_000
        let lifetime = LifetimeCounter()
        var object: Counter? = Counter()
        var listeners: [Listener]? = (0..<peak).map { _ in Listener(lifetime: lifetime) }
        for listener in listeners! {
            object!.safeObserve(\.count, by: listener) { _, _, _ in }
        }
        let (peakCapacity, peakCount) = _ProxyTable.capacityAndCount
        expectInChild(peakCount == peak, "the peak never happened: \(peakCount) entries")
        if listenersFirst {
            listeners = nil
            object = nil
        } else {
            object = nil
            listeners = nil
        }
        expectInChild(lifetime.liveCount == 0, "\(lifetime.liveCount) listeners leaked")
        // Every relation ended with its object, and with it each proxy: no
        // registration came to sweep them.
        let (capacity, count) = _ProxyTable.capacityAndCount
        expectInChild(count == 0, "proxies of listeners whose relations ended were kept: \(count)")
        // The table kept its peak capacity before.
        expectInChild(capacity <= 16, "the proxy table kept \(capacity) of its \(peakCapacity) slots for no entry")
    }

    @Test func objectsWithManyPlainListenersDying_whileOtherThreadsDoTheSame_keepEveryLiveProxy() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            BoundedStateTests.manyRetirementsAtOnce()
        }
        #expect(result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } == "")
    }

    /// Two threads each, 300 times, let an object with 40 plain listeners
    /// die (their proxies retired together, in one pass over the proxy
    /// table), while a third keeps 8 listeners observing and checks at
    /// every step that they still have their relation and their proxy.
    /// Then every proxy goes, and no listener leaks. Runs in the exit test's
    /// process, which nothing else uses.
    static func manyRetirementsAtOnce() {
        let lifetime = LifetimeCounter()
        let steady = (0..<8).map { _ in Listener(lifetime: lifetime) }
        // nonisolated(unsafe): only the third thread uses it until the threads are joined.
        nonisolated(unsafe) let steadyObject = Counter()
        for listener in steady {
            steadyObject.safeObserve(\.count, by: listener) { listener, _, change in
                listener.record("\(change.newValue!)")
            }
        }
        DispatchQueue.concurrentPerform(iterations: 3) { thread in
            for round in 0..<300 {
                if thread == 2 {
                    steadyObject.count = round + 1
                    for listener in steady where SafeObservation.relations(observedBy: listener).count != 1 {
                        print("a live listener lost its relation in round \(round)")
                    }
                    continue
                }
                var object: Counter? = Counter()
                let listeners = (0..<40).map { _ in Listener(lifetime: lifetime) }
                for listener in listeners {
                    object!.safeObserve(\.count, by: listener) { _, _, _ in }
                }
                object = nil
                for listener in listeners where !SafeObservation.relations(observedBy: listener).isEmpty {
                    print("a relation outlived its object in round \(round)")
                }
            }
        }
        expectInChild(steady.allSatisfy { $0.log.count == 300 }, "a steady listener missed changes")
        expectInChild(_ProxyTable.count == 8, "\(_ProxyTable.count) proxies for 8 live listeners")
        expectInChild(lifetime.liveCount == 8, "\(lifetime.liveCount - 8) dead listeners leaked")
        withExtendedLifetime(steady) {}
    }

    /// Between retiring its listeners' proxies and taking them out of the
    /// table together, an object's teardown leaves them filed: a
    /// registration by such a listener meanwhile gets a new proxy at once
    /// (it retried until the teardown ended: 100 ms behind one with
    /// 100,000 relations).
    @Test(.timeLimit(.minutes(1)))
    func aRetiredProxyNotYetTakenOut_isNotReused_aRegistrationGetsANewOne() {
        let listener = Listener()
        let object = Counter()
        object.safeObserve(\.count, by: listener) { _, _, _ in }
        let retired = _ListenerProxy.of(listener, create: false)!
        // As a teardown leaves it between retiring it and taking it out.
        retired.withLock { $0.isTornDown = true }
        retired.isRetired.store(true, ordering: .relaxed)
        let other = Counter()
        let token = other.safeObserve(\.count, by: listener) { listener, _, change in
            listener.record("\(change.newValue!)")
        }
        #expect(token.isActive)
        #expect(_ListenerProxy.of(listener, create: false) !== retired)
        _ProxyTable.removeRetired(retired, [])  // the teardown's removal: finds it gone
        other.count = 1
        #expect(listener.log == ["1"])
        #expect(SafeObservation.relations(observedBy: listener) == [token])
        withExtendedLifetime(object) {}
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
