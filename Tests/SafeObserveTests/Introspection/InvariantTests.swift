import Testing

@testable import SafeObserve

@Suite("Internal: invariants")
struct InvariantTests {
    /// Every kind of step, with both sides checked after each.
    @Test func everyOperationLeavesChannelsAndProxiesConsistent() {
        let counters = [Counter(), Counter()]
        let listeners: [RecordingListener] = [Listener(), OptInListener(), Listener()]
        let person = Person()
        func check() {
            for counter in counters { SafeObservation._checkInvariants(of: counter) }
            SafeObservation._checkInvariants(of: person)
            SafeObservation._checkInvariants(of: person.account)
            for listener in listeners { SafeObservation._checkInvariants(observedBy: listener) }
        }
        var random = SplitMix64(seed: 42)
        var tokens: [ObservationToken] = []
        for _ in 0..<2_000 {
            let counter = counters[random.next(2)]
            let listener = listeners[random.next(3)]
            switch random.next(9) {
            case 0: tokens.append(counter.safeObserve(\.count, by: listener, options: [.old, .prior]) { _, _, _ in })
            case 1: tokens.append(counter.safeObserve(\.title, by: listener) { _, _, _ in })
            case 2: tokens.append(person.safeObserve(\.account.balance, by: listener, options: .old) { _, _, _ in })
            case 3: counter.safeUnobserve(\.count, by: listener)
            case 4: counter.safeUnobserve(by: listener)
            case 5: if !tokens.isEmpty { tokens.remove(at: random.next(tokens.count)).invalidate() }
            case 6: counter.count += 1
            case 7: person.account = random.next(2) == 0 ? Account() : person.account
            default: person.account.balance += 1
            }
            check()
        }
        for listener in listeners { SafeObservation.removeAll(observedBy: listener) }
        check()
        #expect(SafeObservation.relations(of: counters[0]).isEmpty && SafeObservation.relations(of: person).isEmpty)
    }

    #if SAFEOBSERVE_INTERNAL_CHECKS
        /// The check is not vacuous: a relation whose slot disagrees with its
        /// place in the channel stops the process.
        @Test func aCorruptedSlotIsCaught() async {
            await #expect(processExitsWith: .failure) {
                let counter = Counter()
                let listener = Listener()
                let token = counter.safeObserve(\.count, by: listener) { _, _, _ in }
                token._liveRelation?.slot = 7
                SafeObservation._checkInvariants(of: counter)
            }
        }
    #endif
}
