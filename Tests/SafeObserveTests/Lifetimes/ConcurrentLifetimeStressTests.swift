import Synchronization
import Testing

@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The model's operations from several threads at once: observing, mutating,
/// the three removals, token invalidation, and the death of listeners and
/// objects on threads other than the ones that made them — checked at the
/// quiescent point after every round.
///
/// Each thread registers on and mutates only its own objects (registration
/// reads the property); listeners, tokens and handed-off objects are shared,
/// and are released, invalidated or unobserved from any thread.
///
/// Checks: no handler runs for a listener whose deinit started; each relation
/// sees its object's values in order with none skipped while it is live; at
/// quiescence every live relation is listed by both sides and receives the
/// next change exactly once (no lost relation); after release, every object,
/// listener and handler capture is gone. Looped; `SAFEOBSERVE_STRESS_ITERATIONS`
/// multiplies the rounds.
@Suite("Concurrent lifetime stress", .serialized)
struct ConcurrentLifetimeStressTests {
    @Test func randomOperationsFromSeveralThreads_keepEveryInvariant() {
        for round in 0..<StressConfig.rounds(100) {
            runRound(seed: UInt64(round) &* 0x9E37_79B9 &+ 17, threads: 4, steps: 400)
        }
    }

    /// Notification listeners of the three kinds dying on one thread while
    /// two others post (one from a sender some of them filter on): no handler
    /// runs for a listener whose deinit began, and every listener and handler
    /// is released.
    @Test func notificationListenersDyingDuringPosts_areNeverCalledDead() {
        let delivered = Atomic<Int>(0)
        for _ in 0..<StressConfig.rounds(6) {
            let census = StressCensus()
            let hub = NotificationHub()
            let sender = Flag()  // any Sendable object will do as a sender
            let done = Flag()
            stressRunConcurrently([
                { while !done.isSet { hub.post(.stressPing, payload: 1) } },
                { while !done.isSet { hub.post(.stressPing, payload: 2, from: sender) } },
                {
                    for index in 0..<150 {
                        let listener: ProbeListener =
                            switch index % 3 {
                            case 0: ProbePlainListener(census: census)
                            case 1: ProbeSafeListener(census: census)
                            default: ProbeTidyListener(census: census)
                            }
                        let capture = StressCapture(census: census)
                        hub.observe(.stressPing, from: index % 2 == 0 ? nil : sender, by: listener, isolation: nil) {
                            listener, _ in
                            if listener.isDying.load(ordering: .acquiring) { census.violated() }
                            capture.count.add(1, ordering: .relaxed)
                            delivered.add(1, ordering: .relaxed)
                        }
                        // Alive while the posters run a little, then released
                        // here, most likely in the middle of a post.
                        for _ in 0..<(index % 7) { sched_yield() }
                    }
                    done.set()
                },
            ])
            #expect(census.violations.load(ordering: .relaxed) == 0, "a handler ran for a dying listener")
            #expect(census.listeners.liveCount == 0, "a listener leaked")
            withExtendedLifetime(hub) {}
            _ProxyTable.sweepAll()  // the plain listeners' relations end by the sweep too
            #expect(settles { census.captures.liveCount == 0 }, "a handler (and its captures) leaked")
        }
        #expect(delivered.load(ordering: .relaxed) > 0, "no post reached a live listener")
    }

    private func runRound(seed: UInt64, threads: Int, steps: Int) {
        let census = StressCensus()
        runThreadsAndCheck(seed: seed, threads: threads, steps: steps, census: census)
        // A test running in parallel may hold an object or a listener for an
        // instant (its sweeps probe them through weak references, a +1 on
        // their own thread), or a dead listener's relation (then releases its
        // handler there): the last release, and the deinit, may come a
        // moment later, on that thread.
        #expect(settles { census.objects.liveCount == 0 }, "an observed object leaked")
        #expect(settles { census.listeners.liveCount == 0 }, "a listener leaked")
        #expect(settles { census.captures.liveCount == 0 }, "a handler (and its captures) leaked")
    }

    private func runThreadsAndCheck(seed: UInt64, threads: Int, steps: Int, census: StressCensus) {
        let listeners = StressPool<ProbeListener>(count: 6) { index in
            switch index % 3 {
            case 0: ProbePlainListener(census: census)
            case 1: ProbeSafeListener(census: census)
            default: ProbeTidyListener(census: census)
            }
        }
        let handedOff = StressPool<ProbeObject>(count: 0) { _ in ProbeObject(census: census) }
        let tokens = _Mutex<[ObservationToken]>([])
        let probes = _Mutex<[ObservationToken: RelationProbe]>([:])

        stressRunConcurrently(
            (0..<threads).map { thread in
                { @Sendable in
                    var random = SplitMix64(seed: seed &+ UInt64(thread))
                    // This thread's objects: only it registers on and mutates them.
                    var own = [ProbeObject(census: census), ProbeObject(census: census)]
                    for _ in 0..<steps {
                        let object = own[random.next(own.count)]
                        switch random.next(16) {
                        case 0..<5:
                            let listener = listeners.pick(&random)
                            let options = ObservationOptions(rawValue: UInt8(random.next(16)))
                            let probe = RelationProbe(census: census, startingAt: object.value)
                            let token = object.safeObserve(\.value, by: listener, options: options) {
                                listener, _, change in
                                probe.received(change, options: options, listener: listener)
                            }
                            if token.isActive {
                                // A dedupe hit keeps the first relation's probe.
                                probes.withLock {
                                    if $0[token] == nil { $0[token] = probe }
                                }
                                tokens.withLock { $0.append(token) }
                            }
                        case 5..<10:
                            object.value += 1
                        case 10:
                            let token = tokens.withLock { $0.isEmpty ? nil : $0[random.next($0.count)] }
                            token?.invalidate()
                        case 11:
                            object.safeUnobserve(\.value, by: listeners.pick(&random))
                        case 12:
                            SafeObservation.removeAll(observedBy: listeners.pick(&random))
                        case 13:
                            // The old one dies here, or mid-delivery on another thread.
                            listeners.replace(random.next(listeners.count))
                        case 14:
                            // Another thread may release it; nobody mutates it any more.
                            let index = random.next(own.count)
                            handedOff.append(own[index])
                            own[index] = ProbeObject(census: census)
                        default:
                            handedOff.removeRandom(&random)  // often made by another thread
                        }
                    }
                    for object in own { handedOff.append(object) }
                }
            })

        // Quiescent: every relation the library calls live is listed by both
        // sides and gets the next change exactly once.
        let liveObjects = handedOff.all
        let liveListeners = listeners.all
        let allTokens = tokens.withLock { $0 }
        let probeOf = probes.withLock { $0 }
        // A listener this test let go of may still be held for an instant by
        // a test running in parallel (the sweep of dead plain listeners
        // probes listeners with a +1 on its own thread): wait for those.
        func isHeldElsewhere(_ token: ObservationToken) -> Bool {
            guard let listener = token.listener else { return false }
            return !liveListeners.contains { $0 === listener }
        }
        _ = settles { !allTokens.contains(where: isHeldElsewhere) }
        for object in liveObjects {
            let listed = Set(SafeObservation.relations(of: object))
            let expected = allTokens.filter {
                $0.isActive && $0.observedObjectID == ObjectIdentifier(object) && $0.listener != nil
            }
            for token in expected {
                #expect(listed.contains(token), "a live relation is not listed by its object")
                if let listener = token.listener {
                    #expect(SafeObservation.relations(observedBy: listener).contains(token))
                    #expect(liveListeners.contains { $0 === listener })
                }
            }
            let before = expected.map { probeOf[$0]?.changes ?? -1 }
            object.value += 1
            let after = expected.map { probeOf[$0]?.changes ?? -1 }
            #expect(after == before.map { $0 + 1 }, "a live relation missed or repeated a change")
        }
        #expect(census.violations.load(ordering: .relaxed) == 0, "a dead listener was called, or a change skipped")

        // Release everything: nothing may remain.
        listeners.removeAll()
        handedOff.removeAll()
        tokens.withLock { $0 = [] }
        probes.withLock { $0 = [:] }
    }
}

/// Deinit counters and the violation count of one round.
extension NotificationName where Payload == Int {
    fileprivate static let stressPing = NotificationName("ConcurrentLifetimeStressTests.ping")
}

/// What a notification handler captures, counted by the census.
private final class StressCapture: Sendable {
    let census: StressCensus
    let count = Atomic<Int>(0)
    init(census: StressCensus) {
        self.census = census
        census.captures.didInit()
    }
    deinit { census.captures.didDeinit() }
}

private final class StressCensus: Sendable {
    let objects = LifetimeCounter()
    let listeners = LifetimeCounter()
    let captures = LifetimeCounter()
    let violations = Atomic<Int>(0)
    func violated() { violations.add(1, ordering: .relaxed) }
}

private final class ProbeObject: SafeObservable {
    @Observed var value = 0
    let census: StressCensus
    init(census: StressCensus) {
        self.census = census
        census.objects.didInit()
    }
    deinit { census.objects.didDeinit() }
}

private class ProbeListener {
    let isDying = Atomic<Bool>(false)
    let census: StressCensus
    init(census: StressCensus) {
        self.census = census
        census.listeners.didInit()
    }
    deinit {
        isDying.store(true, ordering: .releasing)
        census.listeners.didDeinit()
    }
}

private final class ProbePlainListener: ProbeListener {}

/// Unobserves everything in its own deinit, on whichever thread it dies.
private final class ProbeTidyListener: ProbeListener {
    deinit { SafeObservation.removeAll(observedBy: self) }
}

private final class ProbeSafeListener: ProbeListener, SafeObserver {
    let observerLifetime = ObserverLifetime()
}

/// What one handler captures: the last value its relation saw, and a count.
private final class RelationProbe: Sendable {
    let census: StressCensus
    private let last: Atomic<Int>
    private let count = Atomic<Int>(0)

    init(census: StressCensus, startingAt value: Int) {
        self.census = census
        last = Atomic(value)
        census.captures.didInit()
    }
    deinit { census.captures.didDeinit() }

    /// Changes received (not prior, not initial).
    var changes: Int { count.load(ordering: .acquiring) }

    /// Changes of one object come from one thread at a time: 1, 2, 3, … with none skipped.
    func received(_ change: ObservedChange<Int>, options: ObservationOptions, listener: ProbeListener) {
        if listener.isDying.load(ordering: .acquiring) { census.violated() }
        if change.isInitial { return }
        let last = last.load(ordering: .relaxed)
        if options.contains(.old), change.oldValue != last { census.violated() }
        if change.isPrior { return }
        if options.contains(.new), change.newValue != last + 1 { census.violated() }
        self.last.store(last + 1, ordering: .relaxed)
        count.add(1, ordering: .releasing)
    }
}
