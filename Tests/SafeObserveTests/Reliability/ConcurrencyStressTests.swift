import Synchronization
import Testing

@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Concurrency stress: emission, removal, token invalidation and the death of
/// either side, racing on real threads (one pthread per role, released
/// together by a start gate, so the roles overlap even when the cooperative
/// pool is busy with other suites).
///
/// Registration reads the property, so a test only registers on an object that
/// no other thread mutates at the same time — or, in the churn test, under the
/// lock that also guards that object's mutations. Everything else runs
/// unsynchronized, as the library promises it may.
///
/// Each test loops: one clean run under a sanitizer proves little.
/// `SAFEOBSERVE_STRESS_ITERATIONS=N` multiplies every loop by N; without it the
/// loops are short enough for a debug `swift test`, and shorter still under a
/// sanitizer.
@Suite("Concurrency stress", .serialized)
struct ConcurrencyStressTests {
    // MARK: 1 — emission on different objects

    @Test func stressConcurrentEmissionOnDifferentObjects_deliversExactCounts() {
        let changes = 400
        let objectCount = 4
        for round in 0..<StressConfig.rounds(24) {
            let objectLifetimes = LifetimeCounter()
            let listenerLifetimes = LifetimeCounter()
            let weakObjects = StressWeakBag()
            let weakListeners = StressWeakBag()
            let deliveries = StressAtomic()
            let priors = StressAtomic()
            let initials = StressAtomic()
            let violations = StressAtomic()
            // Options per listener; plain and opt-in listeners alternate.
            let optionSets: [ObservationOptions] = [
                [.new], [.old, .new], [.prior, .new], [.initial, .new], [.old, .prior],
            ]
            var listeners: [StressListener] = []
            for (index, _) in optionSets.enumerated() {
                let listener =
                    index % 2 == 0
                    ? StressListener(lifetimes: listenerLifetimes)
                    : StressOptInListener(lifetimes: listenerLifetimes)
                weakListeners.add(listener)
                listeners.append(listener)
            }
            var objects: [StressObject] = []
            for _ in 0..<objectCount {
                let object = StressObject(lifetimes: objectLifetimes)
                weakObjects.add(object)
                for (listener, options) in zip(listeners, optionSets) {
                    // Changes of one object come from one thread: each relation
                    // must see 1, 2, 3, … in order, with matching old values.
                    let last = StressAtomic()
                    object.safeObserve(\.value, by: listener, options: options) { listener, _, change in
                        if listener.deinitStarted.load(ordering: .acquiring) { violations.add(1) }
                        if change.isInitial {
                            initials.add(1)
                            return
                        }
                        if change.isPrior {
                            priors.add(1)
                            if options.contains(.old), change.oldValue != last.load() { violations.add(1) }
                            return
                        }
                        deliveries.add(1)
                        let expected = last.load() + 1
                        if options.contains(.new), change.newValue != expected { violations.add(1) }
                        if options.contains(.old), change.oldValue != expected - 1 { violations.add(1) }
                        last.store(expected)
                    }
                }
                objects.append(object)
            }
            do {
                let shared = UncheckedSendable(objects)
                stressRunConcurrently(
                    (0..<objectCount).map { index in
                        {
                            let object = shared.value[index]  // the only thread mutating this object
                            for value in 1...changes { object.value = value }
                        }
                    })
            }

            let priorListeners = optionSets.filter { $0.contains(.prior) }.count
            let initialListeners = optionSets.filter { $0.contains(.initial) }.count
            #expect(deliveries.load() == objectCount * optionSets.count * changes, "round \(round)")
            #expect(priors.load() == objectCount * priorListeners * changes, "round \(round)")
            #expect(initials.load() == objectCount * initialListeners, "round \(round)")
            #expect(violations.load() == 0, "out-of-order, wrong or late deliveries in round \(round)")
            for object in objects {
                #expect(SafeObservation.relations(of: object).count == optionSets.count)
            }

            // Leak check, both directions (after the checks above, which
            // need the listeners: optimized builds may release them after
            // their last use).
            withExtendedLifetime(listeners) {}
            listeners = []
            #expect(listenerLifetimes.liveCount == 0, "Listener leaked")
            #expect(weakListeners.allReleased, "Listener leaked")
            stressReleaseDeadListenerMemory()
            objects = []
            #expect(objectLifetimes.liveCount == 0, "Observed object leaked")
            #expect(weakObjects.allReleased, "Observed object leaked")
        }
    }

    // MARK: 2 — listeners released elsewhere during emission

    @Test func stressListenersReleasedOnAnotherThreadDuringEmission_areNeverCalledAfterDeinit() {
        let changes = 1_000
        let listenerCount = 24
        for round in 0..<StressConfig.rounds(40) {
            let object = StressObject()
            let listenerLifetimes = LifetimeCounter()
            let weakListeners = StressWeakBag()
            let violations = StressAtomic()
            let deliveries = StressAtomic()
            let perListener = (0..<listenerCount).map { _ in StressAtomic() }
            var listeners: [StressListener] = []
            for index in 0..<listenerCount {
                let done = Flag()
                let listener =
                    index % 2 == 0
                    ? StressListener(lifetimes: listenerLifetimes, deinitDone: done)
                    : StressOptInListener(lifetimes: listenerLifetimes, deinitDone: done)
                weakListeners.add(listener)
                let count = perListener[index]
                object.safeObserve(\.value, by: listener, options: [.old, .new, .prior]) { listener, _, _ in
                    // The handler holds the listener: it cannot be inside its
                    // deinit, let alone past it.
                    if listener.deinitStarted.load(ordering: .acquiring) { violations.add(1) }
                    if done.isSet { violations.add(1) }
                    count.add(1)
                    deliveries.add(1)
                }
                listeners.append(listener)
            }
            let box = ReleaseBox(listeners)
            listeners = []
            let progress = StressAtomic()
            let shared = UncheckedSendable(object)
            stressRunConcurrently([
                {
                    for value in 1...changes {
                        progress.store(value)
                        shared.value.value = value  // the only mutator
                    }
                },
                {
                    // One listener at a time, spread over the whole emission.
                    let step = changes / (listenerCount + 1)
                    var next = step
                    while box.releaseOne() {
                        stressSpin(until: { progress.load() >= next })
                        next += step
                    }
                },
            ])
            #expect(violations.load() == 0, "a handler ran for a listener in or after its deinit (round \(round))")
            for count in perListener {
                // .prior doubles every change.
                #expect(count.load() <= 2 * changes)
            }
            #expect(listenerLifetimes.liveCount == 0, "Listener leaked")
            #expect(weakListeners.allReleased, "Listener leaked")

            // Opt-in relations are gone already; plain ones go at the next change.
            let before = deliveries.load()
            object.value = -1
            #expect(deliveries.load() == before, "a dead listener was called")
            #expect(SafeObservation.relations(of: object).isEmpty, "relations did not drain (round \(round))")
            stressReleaseDeadListenerMemory()
        }
    }

    // MARK: 3 — observed objects released while relations end elsewhere

    @Test func stressObservedObjectsReleasedWhileTokensEndOnOtherThreads_leakNothing() {
        let objectCount = 24
        for round in 0..<StressConfig.rounds(50) {
            let objectLifetimes = LifetimeCounter()
            let listenerLifetimes = LifetimeCounter()
            let captureLifetimes = LifetimeCounter()
            let weakObjects = StressWeakBag()
            let weakListeners = StressWeakBag()
            let weakCaptures = StressWeakBag()
            // Kept to the end (so their relations can be listed), and two that
            // die during the race.
            var keepers: [StressListener] = [
                StressListener(lifetimes: listenerLifetimes),
                StressListener(lifetimes: listenerLifetimes),
                StressOptInListener(lifetimes: listenerLifetimes),
            ]
            var doomed: [StressListener] = [
                StressListener(lifetimes: listenerLifetimes),
                StressOptInListener(lifetimes: listenerLifetimes),
            ]
            for listener in keepers + doomed { weakListeners.add(listener) }
            var objects: [StressObject] = []
            var tokens: [ObservationToken] = []
            for _ in 0..<objectCount {
                let object = StressObject(lifetimes: objectLifetimes)
                weakObjects.add(object)
                for listener in keepers + doomed {
                    for keyPath in [\StressObject.value, \StressObject.other] {
                        let captured = Captured(captureLifetimes)
                        weakCaptures.add(captured)
                        tokens.append(
                            object.safeObserve(keyPath, by: listener, options: [.old, .new]) { _, _, _ in
                                _ = captured
                            })
                    }
                }
                objects.append(object)
            }
            let objectBox = ReleaseBox(objects)
            objects = []
            let doomedBox = ReleaseBox(doomed)
            doomed = []
            let allTokens = tokens
            do {
                let sharedKeepers = UncheckedSendable(keepers)
                stressRunConcurrently([
                    {
                        // The observed objects die here (or on the last thread,
                        // when it holds one at that moment).
                        while objectBox.releaseOne() {}
                    },
                    {
                        for (index, token) in allTokens.enumerated() where index % 2 == 0 {
                            token.invalidate()
                            if index == allTokens.count / 2 { doomedBox.releaseAll() }
                        }
                    },
                    {
                        for (index, token) in allTokens.enumerated().reversed() where index % 2 == 1 {
                            token.invalidate()
                            token.invalidate()  // idempotent
                        }
                        SafeObservation.removeAll(observedBy: sharedKeepers.value[0])
                    },
                    {
                        // Unobserve on whatever objects are still alive.
                        for weak in weakObjects.all.reversed() {
                            guard let object = weak.object as? StressObject else { continue }
                            object.safeUnobserve(\.value, by: sharedKeepers.value[1])
                            object.safeUnobserve(by: sharedKeepers.value[2])
                        }
                    },
                ])
            }
            #expect(objectLifetimes.liveCount == 0, "Observed object leaked (round \(round))")
            #expect(weakObjects.allReleased, "Observed object leaked")
            #expect(settles { captureLifetimes.liveCount == 0 }, "Handler leaked (round \(round))")
            #expect(weakCaptures.allReleased, "Handler leaked")
            #expect(allTokens.allSatisfy { !$0.isActive }, "a token outlived its relation")
            for keeper in keepers {
                #expect(SafeObservation.relations(observedBy: keeper).isEmpty, "relation left (round \(round))")
            }
            keepers = []
            tokens = []
            #expect(listenerLifetimes.liveCount == 0, "Listener leaked")
            #expect(weakListeners.allReleased, "Listener leaked")
            stressReleaseDeadListenerMemory()
        }
    }

    // MARK: 4 — invalidation racing emission

    @Test func stressInvalidateDuringHeavyEmission_stopsEveryLaterChange() {
        let changes = 3_000
        for round in 0..<StressConfig.rounds(100) {
            let object = StressObject()
            let victim: StressListener = round % 2 == 0 ? StressListener() : StressOptInListener()
            let control = StressListener()
            let started = StressAtomic()  // the change the emitter is about to make
            let maxDelivered = StressAtomic()
            let victimDeliveries = StressAtomic()
            let controlDeliveries = StressAtomic()
            let controlErrors = StressAtomic()
            let token = object.safeObserve(\.value, by: victim) { _, _, change in
                victimDeliveries.add(1)
                maxDelivered.storeMax(change.newValue!)
            }
            object.safeObserve(\.value, by: control, options: [.old, .new]) { _, _, change in
                if change.oldValue! + 1 != change.newValue! { controlErrors.add(1) }
                controlDeliveries.add(1)
            }
            // A different moment and a different way to end the relation each round.
            let threshold = 10 + (round * 97) % 900
            let mode = round % 3
            let startedWhenDone = StressAtomic()
            let shared = UncheckedSendable((object, victim))
            stressRunConcurrently([
                {
                    let object = shared.value.0
                    for value in 1...changes {
                        started.store(value)
                        object.value = value  // the only mutator
                    }
                },
                {
                    stressSpin(until: { started.load() >= threshold })
                    let (object, victim) = shared.value
                    switch mode {
                    case 0: token.invalidate()
                    case 1: object.safeUnobserve(\.value, by: victim)
                    default: SafeObservation.removeAll(observedBy: victim)
                    }
                    startedWhenDone.store(started.load())
                },
            ])
            let limit = startedWhenDone.load()
            // Only the change in flight when the removal returned may still arrive.
            #expect(
                maxDelivered.load() <= limit + 1,
                "change \(maxDelivered.load()) delivered after removal returned at \(limit) (round \(round), mode \(mode))"
            )
            #expect(victimDeliveries.load() <= limit + 1)
            #expect(!token.isActive)
            #expect(controlDeliveries.load() == changes, "the other relation lost changes (round \(round))")
            #expect(controlErrors.load() == 0)
            #expect(SafeObservation.relations(observedBy: victim).isEmpty)
            #expect(SafeObservation.relations(of: object).count == 1)
            _ = shared
        }
    }

    /// Two removals of one relation racing each other (here `removeAll`
    /// against `safeUnobserve` or a second `removeAll`): whichever returns —
    /// even the one that found nothing left to do — must return with the
    /// relation ended, as an uncontended one does.
    @Test func stressUnobserveRacingRemoveAll_returnsOnlyOnceTheRelationEnded() {
        let otherObjects = 300  // makes removeAll's pass over the listener's relations long
        var activeAfterReturn: [String] = []
        var lateDeliveries: [String] = []
        let rounds = StressConfig.rounds(120)
        for round in 0..<rounds {
            let listener = StressListener()
            let others = (0..<otherObjects).map { _ in StressObject() }  // never mutated
            for other in others { other.safeObserve(\.value, by: listener) { _, _, _ in } }
            let target = StressObject()
            let maxDelivered = StressAtomic()
            let token = target.safeObserve(\.value, by: listener) { _, _, change in
                maxDelivered.storeMax(change.newValue!)
            }
            let started = StressAtomic()  // the change the emitter is about to make
            let stop = Flag()
            let limit = StressAtomic(-1)  // `started` once the second removal returned
            let stillActive = Flag()
            let mode = round % 3
            do {
                let shared = UncheckedSendable((target, listener))
                stressRunConcurrently([
                    {
                        let target = shared.value.0
                        var value = 0
                        while !stop.isSet, value < 50_000_000 {
                            value += 1
                            started.store(value)
                            target.value = value  // the only mutator
                        }
                    },
                    { SafeObservation.removeAll(observedBy: shared.value.1) },
                    {
                        let (target, listener) = shared.value
                        // Start once removeAll is under way (it empties the listing first).
                        stressSpin(until: { SafeObservation.relations(observedBy: listener).isEmpty })
                        switch mode {
                        case 0: target.safeUnobserve(\.value, by: listener)
                        case 1: target.safeUnobserve(by: listener)
                        default: SafeObservation.removeAll(observedBy: listener)
                        }
                        limit.store(started.load())
                        if token.isActive { stillActive.set() }
                        // Give the emitter time to make later changes.
                        let until = limit.load() + 200
                        stressSpin(until: { started.load() >= until })
                        stop.set()
                    },
                ])
            }
            let how = ["safeUnobserve(_:by:)", "safeUnobserve(by:)", "removeAll(observedBy:)"][mode]
            if stillActive.isSet { activeAfterReturn.append("round \(round): \(how)") }
            let returnedAt = limit.load()
            let delivered = maxDelivered.load()
            if delivered > returnedAt + 1 {
                lateDeliveries.append("round \(round): \(how) returned at \(returnedAt), \(delivered) delivered")
            }
            #expect(!token.isActive)
            withExtendedLifetime(others) {}
        }
        let stillActiveSummary =
            "the relation was still active after a removal returned, in \(activeAfterReturn.count) of \(rounds) rounds: "
            + "\(activeAfterReturn.prefix(5))"
        #expect(activeAfterReturn.isEmpty, "\(stillActiveSummary)")
        let lateSummary =
            "changes begun after a removal returned were delivered, in \(lateDeliveries.count) of \(rounds) rounds: "
            + "\(lateDeliveries.prefix(5))"
        #expect(lateDeliveries.isEmpty, "\(lateSummary)")
    }

    // MARK: 5 — concurrent registration

    @Test func stressConcurrentRegistrationOfOneRelation_makesExactlyOneRelation() {
        let threads = 8
        for round in 0..<StressConfig.rounds(120) {
            let object = StressObject()  // read by every thread, mutated by none
            let listener: StressListener = round % 2 == 0 ? StressListener() : StressOptInListener()
            let tokens = StressTokenBag()
            let initials = StressAtomic()
            let deliveries = StressAtomic()
            let shared = UncheckedSendable((object, listener))
            stressRunConcurrently(
                (0..<threads).map { _ in
                    {
                        let (object, listener) = shared.value
                        tokens.add(
                            object.safeObserve(\.value, by: listener, options: [.initial, .new]) { _, _, change in
                                if change.isInitial { initials.add(1) } else { deliveries.add(1) }
                            })
                    }
                })
            let all = tokens.all
            #expect(all.count == threads)
            #expect(all.allSatisfy { $0 == all[0] }, "dedupe returned different tokens (round \(round))")
            #expect(all[0].isActive)
            #expect(SafeObservation.relations(of: object).count == 1, "round \(round)")
            #expect(SafeObservation.relations(observedBy: listener).count == 1)
            #expect(initials.load() == 1, "the initial value was delivered \(initials.load()) times")
            object.value = 1
            #expect(deliveries.load() == 1)
            _ = shared
        }
    }

    @Test func stressConcurrentRegistrationOfDistinctListeners_keepsEveryRelation() {
        let threads = 6
        let perThread = 8
        for round in 0..<StressConfig.rounds(80) {
            let object = StressObject()  // fresh: the threads race to create its sentinels
            let listenerLifetimes = LifetimeCounter()
            let listeners = StressTokenBag()
            let kept = StressObjectBag()
            let deliveries = StressAtomic()
            let shared = UncheckedSendable(object)
            stressRunConcurrently(
                (0..<threads).map { thread in
                    {
                        for index in 0..<perThread {
                            let listener: StressListener =
                                (thread + index) % 2 == 0
                                ? StressListener(lifetimes: listenerLifetimes)
                                : StressOptInListener(lifetimes: listenerLifetimes)
                            for keyPath in [\StressObject.value, \StressObject.other] {
                                listeners.add(
                                    shared.value.safeObserve(keyPath, by: listener) { _, _, _ in deliveries.add(1) })
                            }
                            kept.add(listener)
                        }
                    }
                })
            let expected = threads * perThread * 2
            #expect(Set(listeners.all).count == expected, "round \(round)")
            #expect(SafeObservation.relations(of: object).count == expected, "round \(round)")
            object.value = 1
            object.other = 1
            #expect(deliveries.load() == expected)
            kept.removeAll()
            #expect(listenerLifetimes.liveCount == 0, "Listener leaked")
            object.value = 2
            object.other = 2
            #expect(deliveries.load() == expected, "a dead listener was called")
            #expect(SafeObservation.relations(of: object).isEmpty)
            _ = shared
        }
    }

    /// One key path registered at once on instances of three classes, one of
    /// which overrides the property with a getter reading another property:
    /// each class is resolved on its own, whatever order the threads reach
    /// the resolution cache in, and every relation hears its own changes.
    @Test func stressConcurrentRegistrationOnSeveralClasses_resolvesEachClassOnItsOwn() {
        let threads = 4
        for round in 0..<StressConfig.rounds(40) {
            let objects: [StressDial] = (0..<9).map { index in
                switch index % 3 {
                case 0: StressDial()
                case 1: StressPlainDial()
                default: StressScheduledDial()
                }
            }
            let deliveries = (0..<threads).map { _ in (0..<objects.count).map { _ in StressAtomic() } }
            let listeners = (0..<threads).map { _ in StressListener() }
            let shared = UncheckedSendable((objects, listeners, deliveries))
            stressRunConcurrently(
                (0..<threads).map { thread in
                    {
                        let (objects, listeners, deliveries) = shared.value
                        // Each thread its own order (a stride prime to 9), so
                        // the classes race to be resolved first.
                        let stride = [1, 2, 4, 5][thread]
                        for step in 0..<objects.count {
                            let index = (step * stride + thread) % objects.count
                            objects[index].safeObserve(\StressDial.level, by: listeners[thread]) { _, _, _ in
                                deliveries[thread][index].add(1)
                            }
                        }
                    }
                })
            // The listeners must outlive the changes (optimized builds end
            // lifetimes at the last use, and `shared` is not used again).
            withExtendedLifetime(listeners) {
                for object in objects { object.level += 1 }
            }
            for thread in 0..<threads {
                let counts = deliveries[thread].map { $0.load() }
                #expect(counts == Array(repeating: 1, count: objects.count), "round \(round), thread \(thread)")
            }
            _ = shared
        }
    }

    /// Registration is a read: it may overlap other reads of the same object —
    /// plain getters and introspection (`SafeObservation.relations(of:)`) —
    /// without any synchronization, including the first registration of a
    /// property, which creates its bookkeeping.
    @Test func stressRegistrationConcurrentWithReadsOfTheSameObject_isRaceFree() {
        for round in 0..<StressConfig.rounds(60) {
            // Fresh: the first registrations create the sentinels while the
            // readers look at the object. Nobody mutates it.
            let object = StressObject(value: 7)
            let listeners = (0..<16).map { $0 % 2 == 0 ? StressListener() : StressOptInListener() }
            let badReads = StressAtomic()
            let registered = StressAtomic()
            let shared = UncheckedSendable((object, listeners))
            stressRunConcurrently([
                {
                    let (object, listeners) = shared.value
                    for listener in listeners[..<8] {
                        object.safeObserve(\.value, by: listener) { _, _, _ in }
                        registered.add(1)
                    }
                },
                {
                    let (object, listeners) = shared.value
                    for listener in listeners[8...] {
                        object.safeObserve(\.other, by: listener) { _, _, _ in }
                        registered.add(1)
                    }
                },
                {
                    let object = shared.value.0
                    repeat {
                        if object.value != 7 || object.other != 0 { badReads.add(1) }
                    } while registered.load() < 16
                },
                {
                    let object = shared.value.0
                    repeat {
                        if SafeObservation.relations(of: object).count > 16 { badReads.add(1) }
                    } while registered.load() < 16
                },
            ])
            #expect(badReads.load() == 0, "round \(round)")
            #expect(SafeObservation.relations(of: object).count == 16, "round \(round)")
            _ = shared
        }
    }

    // MARK: 6 — opt-in listeners dying during emission

    /// A derived key path reads its properties when it is registered and
    /// each time it is evaluated again: reads, like any other, so they may
    /// overlap other threads' reads of the same properties — here two
    /// threads registering computed properties over `value` and re-evaluating
    /// them (by changing `other`, which only they touch) while two more
    /// threads read `value`.
    @Test func stressDerivedReadsConcurrentWithPlainReadsOfTheSameProperty_isRaceFree() {
        for round in 0..<StressConfig.rounds(40) {
            let object = StressSumObject()
            // The properties' bookkeeping exists before the threads start.
            let first = StressListener()
            object.safeObserve(\.value, by: first) { _, _, _ in }
            object.safeObserve(\.other, by: first) { _, _, _ in }
            let listeners = (0..<16).map { _ in StressListener() }
            let deliveries = StressAtomic()
            let finished = StressAtomic()
            let badReads = StressAtomic()
            let shared = UncheckedSendable((object, listeners))
            stressRunConcurrently([
                {
                    let (object, listeners) = shared.value
                    for listener in listeners[..<8] {
                        object.safeObserve(\.sum, by: listener) { _, _, _ in deliveries.add(1) }
                        // Every `sum` relation so far evaluates again, here.
                        object.other += 1
                    }
                    finished.add(1)
                },
                {
                    let (object, listeners) = shared.value
                    for listener in listeners[8...] {
                        object.safeObserve(\.doubled, by: listener) { _, _, _ in deliveries.add(1) }
                    }
                    finished.add(1)
                },
                {
                    let object = shared.value.0
                    repeat {
                        if object.value != 7 { badReads.add(1) }
                    } while finished.load() < 2
                },
                {
                    let object = shared.value.0
                    repeat {
                        if object.value != 7 { badReads.add(1) }
                    } while finished.load() < 2
                },
            ])
            #expect(badReads.load() == 0, "round \(round)")
            // Each `sum` relation re-evaluated on every later change of `other`.
            #expect(deliveries.load() == 8 * 9 / 2, "round \(round)")
            let before = deliveries.load()
            withExtendedLifetime((first, listeners)) { object.other += 1 }
            #expect(deliveries.load() - before == 8, "round \(round)")
            _ = shared
        }
    }

    @Test func stressOptInListenersDyingDuringEmission_releaseTheirHandlersAtOnce() {
        let changes = 1_000
        let listenerCount = 16
        for round in 0..<StressConfig.rounds(40) {
            let object = StressObject()
            let listenerLifetimes = LifetimeCounter()
            let captureLifetimes = LifetimeCounter()
            let weakListeners = StressWeakBag()
            let weakCaptures = StressWeakBag()
            let violations = StressAtomic()
            var first: [StressListener] = []
            var second: [StressListener] = []
            for index in 0..<listenerCount {
                let listener = StressOptInListener(lifetimes: listenerLifetimes)
                weakListeners.add(listener)
                let captured = Captured(captureLifetimes)
                weakCaptures.add(captured)
                object.safeObserve(\.value, by: listener, options: [.new, .prior]) { listener, _, _ in
                    _ = captured
                    if listener.deinitStarted.load(ordering: .acquiring) { violations.add(1) }
                }
                if index % 2 == 0 { first.append(listener) } else { second.append(listener) }
            }
            let firstBox = ReleaseBox(first)
            let secondBox = ReleaseBox(second)
            first = []
            second = []
            let progress = StressAtomic()
            let shared = UncheckedSendable(object)
            let releaser: @Sendable (ReleaseBox<StressListener>) -> Void = { box in
                // One listener at a time, spread over the whole emission.
                let step = changes / (listenerCount / 2 + 1)
                var next = step
                while box.releaseOne() {
                    stressSpin(until: { progress.load() >= next })
                    next += step
                }
            }
            stressRunConcurrently([
                {
                    for value in 1...changes {
                        progress.store(value)
                        shared.value.value = value  // the only mutator
                    }
                },
                { releaser(firstBox) },
                { releaser(secondBox) },
            ])
            #expect(violations.load() == 0, "a handler ran for a listener in its deinit (round \(round))")
            #expect(listenerLifetimes.liveCount == 0, "Listener leaked")
            #expect(weakListeners.allReleased, "Listener leaked")
            // No change since: opt-in listeners release their handlers in their deinit.
            #expect(settles { captureLifetimes.liveCount == 0 }, "Handler captures leaked (round \(round))")
            #expect(weakCaptures.allReleased, "Handler captures leaked")
            #expect(SafeObservation.relations(of: object).isEmpty, "round \(round)")
            _ = shared
        }
    }

    // MARK: 7 — mixed churn

    @Test func stressMixedChurn_endsWithEverythingReleased() {
        let workers = 4
        let steps = 400
        for round in 0..<StressConfig.rounds(30) {
            let objectLifetimes = LifetimeCounter()
            let listenerLifetimes = LifetimeCounter()
            let captureLifetimes = LifetimeCounter()
            let weakObjects = StressWeakBag()
            let weakListeners = StressWeakBag()
            let weakCaptures = StressWeakBag()
            let deliveries = StressAtomic()
            let violations = StressAtomic()
            // Survivors live through the whole round so that their relations
            // can be listed after the objects died.
            var survivors: [StressListener] = [
                StressListener(lifetimes: listenerLifetimes), StressOptInListener(lifetimes: listenerLifetimes),
            ]
            for survivor in survivors { weakListeners.add(survivor) }
            let objects = StressPool<StressObject>(count: 6) { _ in
                let object = StressObject(lifetimes: objectLifetimes)
                weakObjects.add(object)
                return object
            }
            let listeners = StressPool<StressListener>(count: 10) { index in
                let listener =
                    index % 2 == 0
                    ? StressListener(lifetimes: listenerLifetimes)
                    : StressOptInListener(lifetimes: listenerLifetimes)
                weakListeners.add(listener)
                return listener
            }
            let tokens = StressTokenBag()
            let optionChoices: [ObservationOptions] = [[.new], [.old, .new], [.prior, .old, .new], [.initial, .new]]
            let keyPaths = [\StressObject.value, \StressObject.other]
            do {
                let sharedSurvivors = UncheckedSendable(survivors)
                stressRunConcurrently(
                    (0..<workers).map { worker in
                        {
                            var random = SplitMix64(seed: UInt64(round &* 7919 &+ worker &* 104_729 &+ 1))
                            for _ in 0..<steps {
                                let object = objects.pick(&random)
                                let listener =
                                    random.next(20) == 0
                                    ? sharedSurvivors.value[random.next(2)] : listeners.pick(&random)
                                let keyPath = keyPaths[random.next(2)]
                                switch random.next(14) {
                                case 0, 1, 2, 3:
                                    // Registration reads the object: under its lock, like mutation.
                                    let captured = Captured(captureLifetimes)
                                    weakCaptures.add(captured)
                                    let options = optionChoices[random.next(optionChoices.count)]
                                    let unobserveEvery = 3 + random.next(9)
                                    let token = object.locked { object in
                                        object.safeObserve(keyPath, by: listener, options: options) {
                                            listener, object, change in
                                            _ = captured
                                            deliveries.add(1)
                                            if listener.deinitStarted.load(ordering: .acquiring) { violations.add(1) }
                                            // Sometimes end relations from inside a handler.
                                            if let value = change.newValue, value % unobserveEvery == 0 {
                                                object.safeUnobserve(keyPath, by: listener)
                                            }
                                        }
                                    }
                                    tokens.add(token, keepingAtMost: 64)
                                case 4, 5, 6:
                                    object.locked { object in object[keyPath: keyPath] += 1 }
                                case 7:
                                    object.safeUnobserve(keyPath, by: listener)
                                case 8:
                                    object.safeUnobserve(by: listener)
                                case 9:
                                    tokens.random(&random)?.invalidate()
                                case 10:
                                    SafeObservation.removeAll(observedBy: listener)
                                case 11:
                                    // Introspection reads the object too.
                                    let relations = object.locked { SafeObservation.relations(of: $0) }
                                    if relations.count > 10 * 2 * 4 { violations.add(1) }
                                    _ = SafeObservation.relations(observedBy: listener)
                                case 12:
                                    listeners.replace(random.next(listeners.count))  // may be the last reference
                                default:
                                    objects.replace(random.next(objects.count))  // may be the last reference
                                }
                            }
                        }
                    })
            }

            #expect(violations.load() == 0, "round \(round)")
            // Listeners die first: opt-in ones take their relations along, the
            // next change of each property removes the plain ones'.
            listeners.removeAll()
            #expect(listenerLifetimes.liveCount == survivors.count, "Listener leaked (round \(round))")
            for object in objects.all {
                object.value += 1
                object.other += 1
                let left = SafeObservation.relations(of: object)
                #expect(
                    left.allSatisfy { token in survivors.contains { $0 === token.listener } },
                    "relations of dead listeners left after a change (round \(round))")
            }
            // Then the objects: every relation left (the survivors') ends.
            objects.removeAll()
            #expect(objectLifetimes.liveCount == 0, "Observed object leaked (round \(round))")
            #expect(weakObjects.allReleased, "Observed object leaked")
            for survivor in survivors {
                #expect(SafeObservation.relations(observedBy: survivor).isEmpty, "round \(round)")
            }
            #expect(tokens.all.allSatisfy { !$0.isActive })
            tokens.removeAll()
            #expect(settles { captureLifetimes.liveCount == 0 }, "Handler leaked (round \(round))")
            #expect(weakCaptures.allReleased, "Handler leaked")
            survivors = []
            #expect(listenerLifetimes.liveCount == 0, "Listener leaked (round \(round))")
            #expect(weakListeners.allReleased, "Listener leaked")
            stressReleaseDeadListenerMemory()
            _ = deliveries
        }
    }

    // MARK: 8 — a derived relation ending while its links are replaced

    /// A derived relation ended on one thread while another replaces the
    /// first link of its chain (each replacement re-binds the derivation's
    /// dependencies, making new ones on the new objects): once both have
    /// returned, no dependency is listed on any property of any object,
    /// whichever ran first — a re-bind racing the end must not leave one.
    @Test func stressDerivedRelationEndedWhileLinksAreReplaced_leavesNoDependency() {
        let replacements = 200
        for round in 0..<StressConfig.rounds(200) {
            let tails = [StressChainNode.chain(length: 3), StressChainNode.chain(length: 3)]
            let root = StressChainNode()
            root.next = tails[0]
            let listener = StressListener()
            let delivered = StressAtomic()
            let token = root.safeObserve(\.next?.next?.next?.value, by: listener) { _, _, _ in delivered.add(1) }
            let started = StressAtomic()
            let threshold = (round * 37) % replacements
            let shared = UncheckedSendable((root, tails))
            stressRunConcurrently([
                {
                    let (root, tails) = shared.value
                    for index in 1...replacements {
                        started.store(index)
                        root.next = tails[index & 1]  // the only mutator
                    }
                },
                {
                    stressSpin(until: { started.load() >= threshold })
                    token.invalidate()
                },
            ])
            #expect(!token.isActive)
            let nodes = [root] + tails.flatMap(\.links)
            let listed = nodes.flatMap { SafeObservation._channels(of: $0) }.reduce(0) { total, channel in
                total + channel.state.withLock { state in state.relations.count { $0 != nil } }
            }
            #expect(listed == 0, "\(listed) dependencies left listed (round \(round), threshold \(threshold))")
            withExtendedLifetime((listener, shared)) {}
        }
    }

    // MARK: 9 — a KeyValueObservation ended on another thread

    /// KVO-style code ends an observation by invalidating it or by dropping
    /// it (`observation = nil`), often on another thread than the one
    /// changing the object: once either returns, no later change reaches the
    /// handler (only the one in flight may), and the handler is released.
    @Test func stressKeyValueObservationEndedDuringHeavyEmission_stopsEveryLaterChange() {
        let changes = 3_000
        for round in 0..<StressConfig.rounds(100) {
            let object = StressObject()
            let captures = LifetimeCounter()
            let started = StressAtomic()
            let maxDelivered = StressAtomic()
            let captured = Captured(captures)
            let kept = StressObservationSlot(
                object.observe(\.value, options: .new) { _, change in
                    _ = captured
                    maxDelivered.storeMax(change.newValue!)
                })
            _ = consume captured
            let threshold = 10 + (round * 97) % 900
            let isReleased = round % 2 == 0
            let endedAt = StressAtomic()
            let shared = UncheckedSendable(object)
            stressRunConcurrently([
                {
                    for value in 1...changes {
                        started.store(value)
                        shared.value.value = value  // the only mutator
                    }
                },
                {
                    stressSpin(until: { started.load() >= threshold })
                    if isReleased { kept.release() } else { kept.invalidate() }
                    endedAt.store(started.load())
                },
            ])
            let limit = endedAt.load()
            #expect(
                maxDelivered.load() <= limit + 1,
                "change \(maxDelivered.load()) delivered after the observation ended at \(limit) (round \(round))")
            kept.release()
            #expect(settles { captures.liveCount == 0 }, "the handler leaked (round \(round))")
            #expect(SafeObservation.relations(of: object).isEmpty)
        }
    }

    /// A ``KeyValueObservation`` and its object released at once on two
    /// threads (the object right after a change; the observation invalidated
    /// first in one round of three): whichever side is first ends the
    /// relation, the other finds it ended, and the handler and the object are
    /// released.
    @Test func stressKeyValueObservationAndItsObjectReleasedAtOnce_endTheRelationOnce() {
        let captures = LifetimeCounter()
        let objects = LifetimeCounter()
        for round in 0..<StressConfig.rounds(2_000) {
            let captured = Captured(captures)
            let object = StressObjectSlot(StressObject(lifetimes: objects))
            let observation = StressObservationSlot(
                object.withObject { object in
                    object.observe(\.value, options: round % 2 == 0 ? [.new] : [.old, .new, .prior]) { _, _ in
                        _ = captured
                    }
                })
            _ = consume captured
            let invalidatesFirst = round % 3 == 0
            stressRunConcurrently([
                {
                    object.withObject { $0.value = 1 }
                    object.release()
                },
                {
                    if invalidatesFirst { observation.invalidate() }
                    observation.release()
                },
            ])
            #expect(settles { objects.liveCount == 0 }, "the object leaked (round \(round))")
            #expect(settles { captures.liveCount == 0 }, "the handler leaked (round \(round))")
        }
    }

    /// Every ``KeyValueObservation``'s relation has one shared internal
    /// listener, whose bookkeeping (its proxy) is dropped each time every
    /// object observed through it has died. Two threads observe objects that
    /// die right after, so that drop keeps racing with the other thread's
    /// registrations: none may be lost (each delivers its change and ends
    /// with its object), and every handler is released.
    @Test func stressKeyValueObservationsMadeWhileTheSharedListenersProxyRetires_areNeverLost() {
        let perThread = StressConfig.rounds(3_000)
        let captures = LifetimeCounter()
        let undelivered = StressAtomic()
        let outlived = StressAtomic()
        let body: @Sendable () -> Void = {
            for _ in 0..<perThread {
                let received = StressAtomic()
                let captured = Captured(captures)
                var object: StressObject? = StressObject()
                let observation = object!.observe(\.value, options: .new) { _, _ in
                    _ = captured
                    received.add(1)
                }
                object!.value = 1
                if received.load() != 1 { undelivered.add(1) }
                object = nil  // its relation ends; the shared proxy may retire
                if observation.isActive { outlived.add(1) }
            }
        }
        stressRunConcurrently([body, body])
        #expect(undelivered.load() == 0, "\(undelivered.load()) observations never delivered")
        #expect(outlived.load() == 0, "\(outlived.load()) observations outlived their object")
        #expect(settles { captures.liveCount == 0 }, "handlers leaked")
    }
}

// MARK: - Support (shared with the other stress suites)

/// Frees the allocations of dead plain listeners that the proxy table still
/// lists (its amortized sweep would, later). They are already deinitialized;
/// only their memory is kept, so that their addresses can be probed. Without
/// this, LeakSanitizer reports at exit the weak-reference side tables that the
/// tests' `weak` references gave them: a side table's only pointer is stored
/// encoded in its object's header, where LeakSanitizer cannot see it.
func stressReleaseDeadListenerMemory() {
    _ProxyTable.sweepAll()
}

/// Runs every body on its own pthread, all released together, and joins them
/// (`pthread_join` is what orders the bodies' effects before the caller's checks).
func stressRunConcurrently(_ bodies: [@Sendable () -> Void]) {
    let arrived = StressAtomic()
    let total = bodies.count
    let threads = bodies.map { body in
        stressStartThread {
            arrived.add(1)
            stressSpin(until: { arrived.load() >= total })
            body()
        }
    }
    for thread in threads { pthread_join(thread, nil) }
}

/// Runs `bodies` as ``stressRunConcurrently(_:)`` does, on a thread of its
/// own, and waits by polling: the caller's cooperative-pool thread stays
/// free for the deliveries the bodies wait for (the pool has two threads
/// here, and other tests hold some).
func stressRunConcurrentlyOffThePool(
    isolation: isolated (any Actor)? = #isolation, _ bodies: [@Sendable () -> Void]
) async {
    let done = StressAtomic()
    let thread = stressStartThread {
        stressRunConcurrently(bodies)
        done.add(1)
    }
    while done.load() == 0 { try? await Task.sleep(for: .milliseconds(2)) }
    pthread_join(thread, nil)
}

/// Sleeps 50 µs: a writer that loops without end leaves the cores to the
/// rest of a parallel run now and then (timing tests share them).
func stressBreathe() {
    usleep(50)
}

/// Waits for `thread` (started by ``stressStartThread(_:)``) to end.
func stressJoin(_ thread: pthread_t) {
    pthread_join(thread, nil)
}

/// Starts a pthread running `body`; the caller joins it (``stressJoin(_:)``).
func stressStartThread(_ body: @escaping @Sendable () -> Void) -> pthread_t {
    // Unmanaged: +1 handed to the thread, balanced by takeRetainedValue() there.
    let context = Unmanaged.passRetained(StressThreadBody(body)).toOpaque()
    #if canImport(Darwin)
        var thread: pthread_t?
    #else
        var thread = pthread_t()
    #endif
    let status = pthread_create(
        &thread, nil,
        { context in
            // Unmanaged: balances the passRetained above.
            Unmanaged<StressThreadBody>.fromOpaque(context!).takeRetainedValue().body()
            return nil
        }, context)
    precondition(status == 0, "pthread_create failed (\(status))")
    #if canImport(Darwin)
        return thread!
    #else
        return thread
    #endif
}

private final class StressThreadBody: Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}

/// Spins (yielding) until `condition` holds; `false` if it gave up after a
/// generous bound (so a stuck peer fails a check rather than hanging the run).
@discardableResult
private func stressSpin(until condition: () -> Bool) -> Bool {
    var spins = 0
    while !condition() {
        spins += 1
        if spins > 20_000_000 { return false }
        sched_yield()
    }
    return true
}

private final class StressAtomic: Sendable {
    private let storage: Atomic<Int>
    init(_ value: Int = 0) { storage = Atomic(value) }
    func load() -> Int { storage.load(ordering: .sequentiallyConsistent) }
    func store(_ value: Int) { storage.store(value, ordering: .sequentiallyConsistent) }
    func add(_ value: Int) { storage.add(value, ordering: .sequentiallyConsistent) }
    func storeMax(_ value: Int) {
        var current = load()
        while current < value {
            let (exchanged, original) = storage.compareExchange(
                expected: current, desired: value, ordering: .sequentiallyConsistent)
            if exchanged { return }
            current = original
        }
    }
}

/// Deinit counters.

/// Holds a `KeyValueObservation` that another thread ends.
private final class StressObservationSlot: Sendable {
    private let slot: _Mutex<KeyValueObservation?>
    init(_ observation: KeyValueObservation) { slot = _Mutex(observation) }
    func invalidate() { slot.withLock { $0 }?.invalidate() }
    /// Drops the observation: its `deinit` runs here, after unlocking.
    func release() {
        let observation = slot.withLock { slot in
            defer { slot = nil }
            return slot
        }
        _ = consume observation
    }
}

/// A link of the chains the derived-relation stress test re-binds.
private final class StressChainNode: SafeObservable {
    @Observed var next: StressChainNode?
    @Observed var value = 0

    /// `length` linked nodes; returns the first.
    static func chain(length: Int) -> StressChainNode {
        let first = StressChainNode()
        var last = first
        for _ in 1..<length {
            let node = StressChainNode()
            last.next = node
            last = node
        }
        return first
    }

    /// This node and every node after it.
    var links: [StressChainNode] {
        var links = [self]
        while let next = links.last!.next { links.append(next) }
        return links
    }
}

private final class StressObject: SafeObservable {
    @Observed var value = 0
    @Observed var other = 0
    let lifetimes: LifetimeCounter?
    /// Guards mutation and registration (a read) where several threads touch this object.
    private let guardLock = _Mutex<UInt8>(0)

    init(value: Int = 0, lifetimes: LifetimeCounter? = nil) {
        self.value = value
        self.lifetimes = lifetimes
        lifetimes?.didInit()
    }

    deinit { lifetimes?.didDeinit() }

    func locked<Result>(_ body: (StressObject) -> Result) -> Result {
        guardLock.withLock { _ in body(self) }
    }
}

/// Two computed properties over `value`, for derived key paths.
private final class StressSumObject: SafeObservable {
    @Observed var value = 7
    @Observed var other = 0
    var sum: Int { value + other }
    var doubled: Int { value * 2 }
}

/// A dial, a subclass that overrides nothing, and one whose override of
/// `level` reads another property: `\StressDial.level` is a property on the
/// first two and a derived key path on the third.
private class StressDial: SafeObservable {
    @Observed var level = 0
}
private final class StressPlainDial: StressDial {}
private final class StressScheduledDial: StressDial {
    @Observed var scheduled = 0
    override var level: Int {
        get { scheduled }
        set { scheduled = newValue }
    }
}

/// A plain listener (cleaned lazily) that records the start and the end of its deinit.
private class StressListener {
    let deinitStarted = Atomic<Bool>(false)
    private let lifetimes: LifetimeCounter?
    private let deinitDone: Flag?

    init(lifetimes: LifetimeCounter? = nil, deinitDone: Flag? = nil) {
        self.lifetimes = lifetimes
        self.deinitDone = deinitDone
        lifetimes?.didInit()
    }

    deinit {
        deinitStarted.store(true, ordering: .releasing)
        lifetimes?.didDeinit()
        deinitDone?.set()
    }
}

/// A listener torn down inside its own deinit.
private final class StressOptInListener: StressListener, SafeObserver {
    let observerLifetime = ObserverLifetime()
}

/// Something a handler captures, to prove the handler was released.

// @unchecked Sendable: written once, at init; weak loads are thread-safe.
private final class StressWeakRef: @unchecked Sendable {
    weak var object: AnyObject?
    init(_ object: AnyObject) { self.object = object }
}

private final class StressWeakBag: Sendable {
    private let refs = _Mutex<[StressWeakRef]>([])
    func add(_ object: AnyObject) {
        let ref = StressWeakRef(object)
        refs.withLock { $0.append(ref) }
    }
    var all: [StressWeakRef] { refs.withLock { $0 } }
    var allReleased: Bool { all.allSatisfy { $0.object == nil } }
}

private final class StressTokenBag: Sendable {
    private let tokens = _Mutex<[ObservationToken]>([])
    func add(_ token: ObservationToken) { tokens.withLock { $0.append(token) } }
    func add(_ token: ObservationToken, keepingAtMost limit: Int) {
        tokens.withLock { tokens in
            tokens.append(token)
            if tokens.count > limit { tokens.removeFirst(tokens.count - limit) }
        }
    }
    func random(_ random: inout SplitMix64) -> ObservationToken? {
        let draw = random.next(1 << 30)
        return tokens.withLock { $0.isEmpty ? nil : $0[draw % $0.count] }
    }
    var all: [ObservationToken] { tokens.withLock { $0 } }
    func removeAll() { tokens.withLock { $0 = [] } }
}

/// One object, released (its deinit run) by whichever thread calls `release()`.
private final class StressObjectSlot: @unchecked Sendable {
    // @unchecked Sendable: the object is only reached under the lock, and the
    // mutations of one round come from one thread.
    private let slot: _Mutex<StressObject?>
    init(_ object: StressObject) { slot = _Mutex(object) }
    func withObject<Result>(_ body: (StressObject) -> Result) -> Result {
        // Unwrapped: only called before `release()`.
        body(slot.withLock { $0 }.unsafelyUnwrapped)
    }
    /// Drops the object: its `deinit` runs here, after unlocking.
    func release() {
        let object = slot.withLock { slot in
            defer { slot = nil }
            return slot
        }
        _ = object
    }
}

/// Listeners kept alive by the test until `removeAll`.
private final class StressObjectBag: @unchecked Sendable {
    // @unchecked Sendable: the objects are only stored and released, under the lock.
    private let objects = _Mutex<[AnyObject]>([])
    func add(_ object: AnyObject) { objects.withLock { $0.append(object) } }
    func removeAll() {
        let released = objects.withLock { objects in
            defer { objects = [] }
            return objects
        }
        _ = released
    }
}
