import Testing

@testable import SafeObserve

@Suite("Lifetimes: either side may die first")
struct LifetimeTests {
    // MARK: Semantics 1 — the listener dies first

    @Test func optInListenerDyingFirst_isNeverCalledAgain_andReleasesItsHandlerInItsDeinit() {
        let captures = LifetimeCounter()
        let listeners = LifetimeCounter()
        let counter = Counter()
        let log = EventLog()
        weak var weakListener: OptInListener?
        do {
            let listener = OptInListener(lifetime: listeners)
            weakListener = listener
            let captured = Captured(captures)
            counter.safeObserve(\.count, by: listener) { _, _, change in
                _ = captured
                log.record("\(change.newValue!)")
            }
            counter.count = 1
        }
        #expect(weakListener == nil, "Listener leaked")
        #expect(listeners.liveCount == 0)
        // Torn down inside the listener's deinit: nothing is left, even before any change.
        #expect(captures.liveCount == 0, "Handler captures leaked after the listener died")
        #expect(SafeObservation.relations(of: counter).isEmpty)
        counter.count = 2
        #expect(log.entries == ["1"])
    }

    @Test func plainListenerDyingFirst_isNeverCalledAgain_andIsCleanedByTheNextChange() {
        let captures = LifetimeCounter()
        let counter = Counter()
        let log = EventLog()
        weak var weakListener: Listener?
        do {
            let listener = Listener()
            weakListener = listener
            let captured = Captured(captures)
            counter.safeObserve(\.count, by: listener) { _, _, change in
                _ = captured
                log.record("\(change.newValue!)")
            }
            counter.count = 1
        }
        #expect(weakListener == nil, "Listener leaked")
        counter.count = 2  // reaches the dead listener: the relation is removed
        #expect(log.entries == ["1"])
        #expect(captures.liveCount == 0, "Handler captures leaked after the next change")
        #expect(SafeObservation.relations(of: counter).isEmpty)
    }

    @Test func plainListenerDyingFirst_isCleanedWhenTheObservedObjectDies() {
        let captures = LifetimeCounter()
        var counter: Counter? = Counter()
        do {
            let listener = Listener()
            let captured = Captured(captures)
            counter!.safeObserve(\.count, by: listener) { _, _, _ in _ = captured }
        }
        #expect(captures.liveCount == 1)
        counter = nil
        // Released in the object's deinit, or moments later by a sweep of a
        // parallel suite that was ending the same dead-listener relation
        // (the documented exception: LifetimesAndTeardown).
        #expect(settles { captures.liveCount == 0 }, "Handler captures leaked after the observed object died")
    }

    /// In a process of its own: the proxy table is process-wide, and suites
    /// running in parallel fill it with live listeners that the amortized
    /// sweep steps over, so a bound on this test's entries depends on them.
    @Test func tenThousandShortLivedListeners_onAnObjectThatNeverChanges_stayBounded() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            let counter = Counter()
            let captures = LifetimeCounter()
            for _ in 0..<10_000 {
                let listener = Listener()
                let captured = Captured(captures)
                counter.safeObserve(\.count, by: listener) { _, _, _ in _ = captured }
            }
            // Each registration sweeps older dead relations: only a handful survive.
            let left = SafeObservation.relations(of: counter).count
            expectInChild(left <= 8, "dead relations accumulated: \(left)")
            expectInChild(captures.liveCount <= 8, "handlers of dead listeners accumulated: \(captures.liveCount)")
            // Without the sweep all 10,000 would remain.
            expectInChild(_ProxyTable.count <= 8, "dead proxies accumulated: \(_ProxyTable.count)")
        }
        #expect(result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } == "")
    }

    // MARK: Semantics 2 — the observed object dies first

    @Test func observedObjectDyingFirst_tearsDownEveryRelationInItsDeinit() {
        let counters = LifetimeCounter()
        let listeners = LifetimeCounter()
        let captures = LifetimeCounter()
        let plain = Listener(lifetime: listeners)
        let optIn = OptInListener(lifetime: listeners)
        weak var weakCounter: Counter?
        do {
            let counter = Counter(lifetime: counters)
            weakCounter = counter
            func observeBoth<L: AnyObject>(by listener: L) {
                let captured = Captured(captures)
                counter.safeObserve(\.count, by: listener, options: [.initial, .old, .new, .prior]) { _, _, _ in
                    _ = captured
                }
                counter.safeObserve(\.title, by: listener) { _, _, _ in _ = captured }
            }
            observeBoth(by: plain)
            observeBoth(by: optIn)
            #expect(SafeObservation.relations(of: counter).count == 4)
        }
        #expect(weakCounter == nil, "Observed object leaked")
        #expect(counters.liveCount == 0)
        #expect(captures.liveCount == 0, "Handler captures leaked after the observed object died")
        #expect(SafeObservation.relations(observedBy: plain).isEmpty)
        #expect(SafeObservation.relations(observedBy: optIn).isEmpty)
        #expect(listeners.liveCount == 2, "nothing else was released")
    }

    @Test func observedObjectDyingFirst_retainsNoListener() {
        let counter = Counter()
        weak var weakListener: Listener?
        do {
            let listener = Listener()
            weakListener = listener
            counter.safeObserve(\.count, by: listener) { _, _, _ in }
        }
        #expect(weakListener == nil, "The relation retained its listener")
    }

    @Test func changesMadeInsideTheObservedObjectsDeinit_areNotDelivered() {
        let listener = Listener()
        let log = EventLog()
        var counter: Counter? = Counter()
        counter!.safeObserve(\.count, by: listener, options: [.prior, .new]) { _, _, change in
            log.record(describe(change))
        }
        counter!.onDeinit = { counter in counter.count = 99 }
        counter!.count = 1
        counter = nil
        #expect(log.entries == ["nil->nil prior", "nil->1"])
    }

    @Test func tokensDoNotKeepAnythingAlive() {
        let captures = LifetimeCounter()
        var token: ObservationToken?
        weak var weakCounter: Counter?
        weak var weakListener: Listener?
        do {
            let counter = Counter()
            let listener = Listener()
            weakCounter = counter
            weakListener = listener
            let captured = Captured(captures)
            token = counter.safeObserve(\.count, by: listener) { _, _, _ in _ = captured }
        }
        #expect(weakCounter == nil, "Token kept the observed object alive")
        #expect(weakListener == nil, "Token kept the listener alive")
        #expect(captures.liveCount == 0, "Token kept the handler alive")
        #expect(token?.isActive == false)
        token?.invalidate()  // after both sides died: a no-op
    }

    @Test func aKeptTokenDoesNotKeepTheHandlerAliveOnceTheRelationEnded() {
        let captures = LifetimeCounter()
        let counter = Counter()
        let listener = Listener()
        var tokens: [ObservationToken] = []
        do {
            let captured = Captured(captures)
            tokens.append(counter.safeObserve(\.count, by: listener) { _, _, _ in _ = captured })
            tokens.append(counter.safeObserve(\.title, by: listener) { _, _, _ in _ = captured })
        }
        tokens[0].invalidate()
        #expect(captures.liveCount == 1, "the other relation still holds the capture")
        counter.safeUnobserve(\.title, by: listener)
        #expect(captures.liveCount == 0, "Handler captures leaked while tokens were held")
        #expect(tokens.allSatisfy { !$0.isActive })
        #expect(tokens[0] != tokens[1])
        #expect(tokens[0].keyPath == \Counter.count, "a token keeps describing its relation after it ended")
    }

    // MARK: Semantics 5 — unobserving from the listener's own deinit

    @Test(arguments: [false, true])
    func listenerMayUnobserveFromItsOwnDeinit(optIn: Bool) {
        let counter = Counter()
        let log = EventLog()
        do {
            if optIn {
                let listener = OptInListener()
                counter.safeObserve(\.count, by: listener) { _, _, _ in log.record("called") }
                listener.onDeinit = { [counter] listener in
                    counter.safeUnobserve(\.count, by: listener)
                    counter.safeUnobserve(by: listener)
                    SafeObservation.removeAll(observedBy: listener)
                }
            } else {
                let listener = Listener()
                counter.safeObserve(\.count, by: listener) { _, _, _ in log.record("called") }
                listener.onDeinit = { [counter] listener in
                    counter.safeUnobserve(\.count, by: listener)
                    counter.safeUnobserve(by: listener)
                    SafeObservation.removeAll(observedBy: listener)
                }
            }
        }
        // The listener's deinit (and so its unobserving) runs where its last
        // reference goes: here, or moments later in a parallel suite's sweep
        // that had loaded it (the documented exception: LifetimesAndTeardown).
        #expect(settles { SafeObservation.relations(of: counter).isEmpty })
        counter.count = 1
        #expect(log.entries.isEmpty)
    }

    // MARK: Semantics 6 — self-observation

    @Test func anObjectMayObserveItselfWithoutARetainCycle() {
        let counters = LifetimeCounter()
        let log = EventLog()
        weak var weakCounter: Counter?
        do {
            let counter = Counter(lifetime: counters)
            weakCounter = counter
            counter.safeObserve(\.count, by: counter, options: [.old, .new]) { this, _, change in
                log.record("\(change.oldValue!)->\(change.newValue!) title=\(this.title)")
            }
            counter.count = 1
        }
        #expect(weakCounter == nil, "Self-observation leaked")
        #expect(counters.liveCount == 0)
        #expect(log.entries == ["0->1 title=untitled"])
    }

    // MARK: Address reuse

    @Test func aNewObjectAtADeadObjectsAddressInheritsNoRelation() {
        let listener = Listener()
        let log = EventLog()
        var reused = 0
        for _ in 0..<200 {
            var counter: Counter? = Counter()
            let oldAddress = ObjectIdentifier(counter!)
            counter!.safeObserve(\.count, by: listener) { _, _, _ in log.record("old") }
            counter = nil
            let fresh = Counter()
            if ObjectIdentifier(fresh) == oldAddress { reused += 1 }
            #expect(SafeObservation.relations(of: fresh).isEmpty)
            fresh.count = 1
            // Observing the fresh object is a new relation, never the dead one's.
            let token = fresh.safeObserve(\.count, by: listener) { _, _, _ in log.record("new") }
            #expect(token.isActive)
            fresh.count = 2
        }
        #expect(log.entries == Array(repeating: "new", count: 200))
        // ASan quarantines freed memory, so addresses are not reused there.
        #expect(
            reused > 0 || isAddressSanitizerActive, "the allocator never reused an address; the test proved nothing")
    }
}
