import Synchronization
import Testing

@testable import SafeObserve

// MARK: - Fixtures: a small object graph

final class Account: SafeObservable {
    @Observed var balance: Int
    let lifetime: LifetimeCounter?
    init(balance: Int = 0, lifetime: LifetimeCounter? = nil) {
        self.balance = balance
        self.lifetime = lifetime
        lifetime?.didInit()
    }
    deinit { lifetime?.didDeinit() }
}

final class Person: SafeObservable {
    @Observed var first = "Ada"
    @Observed var last = "Lovelace"
    @Observed var nickname = "Countess"
    @Observed var usesNickname = false
    @Observed var account: Account
    @Observed var child: Person?
    let lifetime: LifetimeCounter?

    /// Computed: depends on `first` and `last`.
    var fullName: String { first + " " + last }
    /// Computed with branches: depends on `usesNickname` and on one branch.
    var displayName: String { usesNickname ? nickname : fullName }

    init(account: Account = Account(), lifetime: LifetimeCounter? = nil) {
        self.account = account
        self.lifetime = lifetime
        lifetime?.didInit()
    }
    deinit { lifetime?.didDeinit() }
}

/// A chain of depth 3: `\A.b.c.value`, and a cycle `\A.b.a`.
final class NodeA: SafeObservable {
    @Observed var b: NodeB
    init(b: NodeB) { self.b = b }
}
final class NodeB: SafeObservable {
    @Observed var c = NodeC()
    /// Back to an `A` (a cycle in the graph); unowned, so it may dangle.
    @Observed var a: NodeA?
}
final class NodeC: SafeObservable {
    @Observed var value = 0
}

/// An intermediate reached through `unowned`: reading the chain after the
/// owner died would trap, so SafeObserve must never read it then.
final class Owned: SafeObservable {
    unowned let owner: Account
    init(owner: Account) { self.owner = owner }
}

/// A computed property over many objects: more dependencies than a chain.
final class Portfolio: SafeObservable {
    let accounts = (0..<12).map { Account(balance: $0) }
    @Observed var window = 0..<12
    var total: Int { accounts[window].reduce(0) { $0 + $1.balance } }
}

/// Every active relation on `object`'s properties, the internal dependencies
/// of derived key paths included (`relations(of:)` lists only the relations
/// rooted at an object, so it cannot tell whether an intermediate is watched).
func watchers(of object: some SafeObservable) -> Int {
    SafeObservation._channels(of: object).reduce(0) { $0 + $1.liveRelations().count }
}

/// A root with no `@Observed` property, whose computed `reading` reads an
/// account's balance only while `usesAccount` (a plain property) is set.
final class Gauge: SafeObservable {
    let account: Account
    var usesAccount = true
    init(account: Account) { self.account = account }
    var reading: Int { usesAccount ? account.balance : 0 }
}

@Suite("Derived key paths: chains, optional chains, computed properties")
struct DerivedKeyPathTests {
    // MARK: Chains

    @Test func aChainDelivers_whenTheLeafChanges_andWhenAnIntermediateIsReplaced() {
        let person = Person(account: Account(balance: 10))
        let listener = Listener()
        person.safeObserve(\.account.balance, by: listener, options: [.old, .new]) { listener, _, change in
            listener.record(describe(change))
        }
        person.account.balance = 11
        let old = person.account
        #expect(watchers(of: old) == 1, "the account is watched through the chain")
        person.account = Account(balance: 50)
        #expect(listener.log == ["10->11", "11->50"])

        // Re-targeted: the old account no longer delivers, the new one does.
        old.balance = 99
        person.account.balance = 51
        #expect(listener.log == ["10->11", "11->50", "50->51"])
        #expect(watchers(of: old) == 0, "the replaced account is still watched")
        #expect(watchers(of: person.account) == 1)
    }

    @Test func aChainOfDepthThree_reTargetsAtEveryLevel() {
        let a = NodeA(b: NodeB())
        let listener = Listener()
        a.safeObserve(\.b.c.value, by: listener, options: [.old, .new]) { listener, _, change in
            listener.record(describe(change))
        }
        a.b.c.value = 1
        let oldC = a.b.c
        a.b.c = NodeC()  // depth 2 replaced
        let oldB = a.b
        let newB = NodeB()
        newB.c.value = 7
        a.b = newB  // depth 1 replaced
        oldC.value = 100
        oldB.c.value = 100
        a.b.c.value = 8
        #expect(listener.log == ["0->1", "1->0", "0->7", "7->8"])
    }

    /// `a -> b -> a` (strong both ways), observed along `\.b.a?.b.c.value`.
    private func observedCycle() -> (a: NodeA, b: NodeB, listener: Listener) {
        let b = NodeB()
        let a = NodeA(b: b)
        b.a = a
        let listener = Listener()
        a.safeObserve(\.b.a?.b.c.value, by: listener, options: [.new]) { listener, _, change in
            listener.record("\(change.newValue.map { "\($0.map(String.init) ?? "nil")" } ?? "-")")
        }
        return (a, b, listener)
    }

    @Test func aCycleInTheObjectGraph_isObservedWithoutLooping() {
        let (a, b, listener) = observedCycle()
        b.c.value = 5
        b.a = nil  // also breaks the strong cycle
        #expect(listener.log == ["5", "nil"])
        withExtendedLifetime(a) {}  // the root, held here
    }

    @Test func replacingALinkOfACycle_reTargets_andUnbindsTheReplacedObject() {
        let (a, b, listener) = observedCycle()
        b.c.value = 5
        let newB = NodeB()
        newB.c.value = 9
        newB.a = a
        a.b = newB  // a -> newB -> a: the chain now runs through newB only
        b.c.value = 6  // replaced: not delivered
        newB.c.value = 10
        #expect(listener.log == ["5", "9", "10"])
        #expect(watchers(of: b) == 0 && watchers(of: b.c) == 0, "the replaced link is still watched")
        #expect(watchers(of: newB) == 2, "newB.a and newB.c, each once although the chain reads newB twice")
        newB.a = nil  // break the strong cycle a -> newB -> a
        b.a = nil
    }

    // MARK: Optional chains

    @Test func anOptionalChain_deliversNilWhenTheLinkIsRemoved_andTheValueAgainWhenItIsSet() {
        let parent = Person()
        let listener = Listener()
        parent.safeObserve(\.child?.account.balance, by: listener, options: [.initial, .new]) { listener, _, change in
            listener.record(change.newValue!.map(String.init) ?? "nil")
        }
        let child = Person(account: Account(balance: 3))
        parent.child = child
        child.account.balance = 4
        parent.child = nil
        child.account.balance = 5  // no longer reachable: not delivered
        parent.child = child
        #expect(listener.log == ["nil", "3", "4", "nil", "5"])
    }

    // MARK: Computed properties

    @Test func aComputedProperty_deliversTheRecomputedValue_whenAnyPropertyItReadsChanges() {
        let person = Person()
        let listener = Listener()
        person.safeObserve(\.fullName, by: listener, options: [.old, .new]) { listener, _, change in
            listener.record("\(change.oldValue!) -> \(change.newValue!)")
        }
        person.first = "Grace"
        person.last = "Hopper"
        person.nickname = "Amazing"  // not read by fullName
        #expect(listener.log == ["Ada Lovelace -> Grace Lovelace", "Grace Lovelace -> Grace Hopper"])
    }

    @Test func aComputedPropertysDependencies_followItsBranches() {
        let person = Person()
        let listener = Listener()
        person.safeObserve(\.displayName, by: listener) { listener, _, change in listener.record(change.newValue!) }
        person.nickname = "Ada"  // the nickname branch is not taken: not a dependency yet
        #expect(listener.log.isEmpty)
        person.usesNickname = true  // -> "Ada"; now depends on the nickname, not the names
        person.first = "Augusta"  // the name branch was left: not delivered
        person.nickname = "The Countess"  // -> "The Countess"
        person.usesNickname = false  // -> "Augusta Lovelace"
        person.last = "King"  // -> "Augusta King"
        person.nickname = "unused"  // left again: not delivered
        #expect(listener.log == ["Ada", "The Countess", "Augusta Lovelace", "Augusta King"])
    }

    @Test func aComputedPropertyOverManyObjects_followsItsDependencySetAsItGrowsAndShrinks() {
        let portfolio = Portfolio()
        let listener = Listener()
        portfolio.safeObserve(\.total, by: listener) { listener, _, change in listener.record("\(change.newValue!)") }
        portfolio.accounts[11].balance = 111  // 13 dependencies: the window and 12 balances
        portfolio.window = 0..<3  // shrinks to 4 dependencies
        portfolio.accounts[11].balance = 0  // no longer read: not delivered
        portfolio.accounts[2].balance = 20
        portfolio.window = 0..<12  // grows again
        portfolio.accounts[11].balance = 5
        // 0 + 1 + … + 10 + 111 = 166; 0 + 1 + 2 = 3; 0 + 1 + 20 = 21;
        // 21 + (3 + … + 10) + 0 = 73; 73 + 5 = 78.
        #expect(listener.log == ["166", "3", "21", "73", "78"])
    }

    // MARK: Options, dedupe, removal

    @Test func optionsBehaveAsForASingleProperty() {
        let person = Person(account: Account(balance: 1))
        let listener = Listener()
        person.safeObserve(\.account.balance, by: listener, options: [.initial, .prior, .old, .new]) {
            listener, _, change in listener.record(describe(change))
        }
        person.account.balance = 2
        person.account = Account(balance: 3)
        #expect(listener.log == ["nil->1 initial", "1->nil prior", "1->2", "2->nil prior", "2->3"])
    }

    @Test func observingTheSameDerivedKeyPathTwice_isOneRelation_andRemovalIsIdempotent() {
        let person = Person()
        let listener = Listener()
        let first = person.safeObserve(\.fullName, by: listener) { listener, _, _ in listener.record("first") }
        // A duplicate keeps the first handler and options: no `.initial`, no old value.
        let second = person.safeObserve(\.fullName, by: listener, options: [.initial, .old, .new]) {
            listener, _, _ in listener.record("second")
        }
        #expect(first == second)
        #expect(second.options == [.new])
        person.first = "A"
        #expect(listener.log == ["first"])
        #expect(SafeObservation.relations(of: person) == [first])
        #expect(SafeObservation.relations(observedBy: listener) == [first])

        person.safeUnobserve(\.fullName, by: listener)
        person.safeUnobserve(\.fullName, by: listener)
        first.invalidate()
        person.first = "B"
        #expect(listener.log == ["first"])
        #expect(SafeObservation.relations(of: person).isEmpty)
        // Observing again works.
        person.safeObserve(\.fullName, by: listener) { listener, _, _ in listener.record("again") }
        person.last = "C"
        #expect(listener.log == ["first", "again"])
    }

    @Test func twoChainsThroughOneSharedIntermediate_areEachDeliveredOncePerChange() {
        let shared = Account()
        let alice = Person(account: shared)
        let bob = Person(account: shared)
        let listener = Listener()
        alice.safeObserve(\.account.balance, by: listener) { listener, _, change in
            listener.record("alice \(change.newValue!)")
        }
        bob.safeObserve(\.account.balance, by: listener) { listener, _, change in
            listener.record("bob \(change.newValue!)")
        }
        shared.balance = 7
        #expect(listener.log == ["alice 7", "bob 7"])
        alice.account = Account()
        shared.balance = 8
        #expect(listener.log == ["alice 7", "bob 7", "alice 0", "bob 8"])
    }

    // MARK: Re-entrancy

    @Test func replacingAnIntermediateInsideTheCallback_reTargetsToTheLatestIntermediate() {
        let person = Person(account: Account(balance: 1))
        let listener = Listener()
        let replacement = Account(balance: 100)
        let shared = UncheckedSendable(replacement)  // used on this thread only
        person.safeObserve(\.account.balance, by: listener, options: [.old, .new]) { listener, person, change in
            listener.record(describe(change))
            if change.newValue == 2 { person.account = shared.value }
        }
        let first = person.account
        first.balance = 2
        first.balance = 3  // detached inside the callback: not delivered
        replacement.balance = 101
        #expect(listener.log == ["1->2", "2->100", "100->101"])
    }

    @Test func anOldValueCapturedForADependencyDroppedMidChange_isReleased_andNeverDelivered() {
        // `person.child?.account` with `.old` captures the old account before
        // each change of a dependency. Here a handler that runs first replaces
        // the link while the change of `child.account` is being delivered, so
        // the derivation drops that dependency before its own turn comes: the
        // account it captured must be released then, not kept for as long as
        // the relation lives, and must never be delivered as a later old value.
        let accounts = LifetimeCounter()
        let person = Person()
        let firstChild = Person(account: Account(balance: 1, lifetime: accounts))
        let secondChild = Person(account: Account(balance: 2))
        person.child = firstChild
        let earlier = Listener()
        let shared = UncheckedSendable((person, secondChild))  // used on this thread only
        firstChild.safeObserve(\.account, by: earlier) { _, _, _ in
            shared.value.0.child = shared.value.1
        }
        let listener = Listener()
        person.safeObserve(\.child?.account.balance, by: listener, options: [.old, .new]) { listener, _, change in
            listener.record(describe(change))
        }
        person.safeObserve(\.child?.account, by: listener, options: [.old]) { _, _, _ in }
        firstChild.account = Account(balance: 10)
        #expect(listener.log == ["Optional(10)->Optional(2)"])
        secondChild.account.balance = 3
        #expect(listener.log == ["Optional(10)->Optional(2)", "Optional(2)->Optional(3)"])
        firstChild.safeUnobserve(by: earlier)
        person.child = nil
        firstChild.account = Account()
        #expect(accounts.liveCount == 0, "an old value captured for a dropped dependency leaked")
    }

    @Test func unobservingInsideTheCallback_stopsEveryLaterDelivery() {
        let person = Person()
        let listener = Listener()
        person.safeObserve(\.fullName, by: listener) { listener, person, _ in
            listener.record("called")
            person.safeUnobserve(\.fullName, by: listener)
        }
        person.first = "A"
        person.last = "B"
        #expect(listener.log == ["called"])
    }

    // MARK: Lifetimes

    /// The interleaving a re-bind racing the relation's end can produce
    /// (the concurrency stress suite races it for real): a re-bind files a
    /// new dependency in the derivation's state, the relation ends before
    /// that dependency reaches its channel, and only then does the re-bind
    /// add it. Ending must end every filed dependency, so that the channel
    /// refuses it: otherwise it stays listed for the object's lifetime.
    @Test func aDependencyFiledByARebind_thatTheRelationsEndOvertook_isRefusedByItsChannel() throws {
        let person = Person(account: Account(balance: 1))
        let listener = Listener()
        let token = person.safeObserve(\.account.balance, by: listener) { _, _, _ in }
        let relation = try #require(token._liveRelation as? _DerivedRelation)
        let derivation = relation.derivation
        // An object the derivation does not read yet, with a sentinel (as
        // the tracked read of a re-bind would create).
        let newcomer = Account(balance: 2)
        newcomer.safeObserve(\.balance, by: Listener()) { _, _, _ in }.invalidate()
        let channel = try #require(SafeObservation._channels(of: newcomer).first)
        let dependency = _Relation(
            keyPath: \Account.balance, objectID: ObjectIdentifier(newcomer), options: [], proxy: derivation.proxy,
            channel: channel, isDependency: true, deliver: { _, _, _, _, _ in })
        let bound = derivation.state.withLock { $0.dependencies.map { $0.channelID! } }
        let action = derivation.state.withLock { state in
            state.rebind(to: bound + [ObjectIdentifier(channel)], isChain: false) { _ in dependency }
        }
        #expect(action.added.count == 1)
        token.invalidate()
        #expect(!dependency.isActive, "ending the relation ends a dependency filed but not yet added")
        #expect(!channel.add(dependency), "its channel took it: it would stay listed")
        #expect(watchers(of: newcomer) == 0)
        withExtendedLifetime((person, listener)) {}
    }

    @Test func theRootDying_endsTheRelationAtOnce_andReleasesTheHandler() {
        let captures = LifetimeCounter()
        let people = LifetimeCounter()
        let account = Account()
        let listener = Listener()
        weak var weakPerson: Person?
        do {
            let person = Person(account: account, lifetime: people)
            weakPerson = person
            let captured = Captured(captures)
            person.safeObserve(\.account.balance, by: listener) { _, _, _ in _ = captured }
            #expect(watchers(of: account) == 1)
        }
        #expect(weakPerson == nil, "Person leaked")
        #expect(captures.liveCount == 0, "Handler captures leaked after the root died")
        #expect(SafeObservation.relations(observedBy: listener).isEmpty)
        #expect(watchers(of: account) == 0, "the intermediate is still watched")
        account.balance = 1  // nobody left to call
        #expect(listener.log.isEmpty)
    }

    @Test func anIntermediateThatDiesWhileObserved_isTornDown_withoutReadingTheChain() {
        let accounts = LifetimeCounter()
        var account: Account? = Account(balance: 1, lifetime: accounts)
        let owned = Owned(owner: account!)
        let listener = Listener()
        // `\.owner.balance` through `unowned`: reading it after the owner
        // died traps — this test would crash if the teardown evaluated it.
        owned.safeObserve(\.owner.balance, by: listener) { listener, _, change in
            listener.record("\(change.newValue!)")
        }
        account!.balance = 2
        account = nil
        #expect(accounts.liveCount == 0, "Account leaked")
        #expect(listener.log == ["2"])
        // The root has no `@Observed` property: with the account gone, nothing
        // the key path reads can change again, so the relation ended.
        #expect(SafeObservation.relations(observedBy: listener).isEmpty, "an inert relation stays")
    }

    @Test func aRelationLeftWithNoDependency_ends_evenIfTheRootOutlivesIt_orDiesLater() {
        let captures = LifetimeCounter()
        let listener = Listener()  // stays alive
        do {
            var account: Account? = Account(balance: 1)
            let owned = Owned(owner: account!)  // no @Observed property of its own
            do {
                let captured = Captured(captures)
                owned.safeObserve(\.owner.balance, by: listener) { _, _, _ in _ = captured }
            }
            account = nil  // its only dependency dies
            #expect(captures.liveCount == 0, "the handler of a relation that can never deliver again is kept")
            _ = owned
        }  // the root dies: nothing was left to notice it
        #expect(captures.liveCount == 0, "handler leaked")
        #expect(SafeObservation.relations(observedBy: listener).isEmpty)
    }

    @Test func anEvaluationThatReadsNoObservedProperty_deliversItsValue_thenEnds() {
        let captures = LifetimeCounter()
        let account = Account(balance: 1)
        let gauge = Gauge(account: account)
        let listener = Listener()
        let captured = Captured(captures)
        gauge.safeObserve(\.reading, by: listener) { listener, _, change in
            _ = captured
            listener.record("\(change.newValue!)")
        }
        account.balance = 2
        gauge.usesAccount = false  // not observed: nothing delivered yet
        account.balance = 3  // re-evaluated: 0, and no @Observed property read
        account.balance = 4
        #expect(listener.log == ["2", "0"])
        #expect(watchers(of: account) == 0)
        #expect(SafeObservation.relations(observedBy: listener).isEmpty)
        #expect(captures.liveCount == 1, "only the test's own reference remains")
    }

    /// An opt-in listener's relations end in its deinit; a plain listener's
    /// at the next change that finds it gone (or by a sweep). Either way the
    /// handler is released and no dependency stays bound.
    @Test(arguments: [true, false])
    func theListenerDying_releasesTheRelationAndEveryDependency(optIn: Bool) {
        let captures = LifetimeCounter()
        let person = Person()
        weak var weakListener: RecordingListener?
        do {
            let listener: RecordingListener = optIn ? OptInListener() : Listener()
            weakListener = listener
            let captured = Captured(captures)
            person.safeObserve(\.account.balance, by: listener) { _, _, _ in _ = captured }
            person.safeObserve(\.fullName, by: listener) { _, _, _ in _ = captured }
        }
        #expect(weakListener == nil, "Listener leaked")
        if optIn {
            #expect(captures.liveCount == 0, "Handler captures leaked after the listener died")
        } else {
            person.account.balance = 3  // finds the listener gone (unless a sweep was first)
            person.first = "B"
            #expect(settles { captures.liveCount == 0 }, "handler leaked after its plain listener died")
        }
        #expect(SafeObservation.relations(of: person).isEmpty)
        #expect(watchers(of: person) == 0 && watchers(of: person.account) == 0, "a dependency is still bound")
    }

    // MARK: Threads

    @Test func chainsMutatedAndReTargetedOnSeveralThreads_deliverExactlyTheirOwnChanges() async {
        let rounds = StressConfig.rounds(20)
        for round in 0..<rounds {
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<4 {
                    group.addTask {
                        // Each worker owns its graph (mutations need the
                        // same synchronization as any write); the relations,
                        // the sweep and the global caches are shared.
                        let person = Person(account: Account(balance: 0))
                        let listener = OptInListener()
                        let total = Atomic<Int>(0)
                        person.safeObserve(\.account.balance, by: listener) { _, _, change in
                            total.add(change.newValue!, ordering: .relaxed)
                        }
                        for step in 1...50 {
                            if step % 10 == 0 { person.account = Account(balance: 0) }
                            person.account.balance = 1
                        }
                        #expect(total.load(ordering: .relaxed) == 50, "round \(round), worker \(worker)")
                        person.safeUnobserve(\.account.balance, by: listener)
                        person.account.balance = 1000
                        #expect(total.load(ordering: .relaxed) == 50, "round \(round), worker \(worker)")
                    }
                }
            }
        }
    }

    @Test func chainDeliveriesRacingRemovalAndListenerDeathOnOtherThreads_endWithNothingBound() async {
        let rounds = StressConfig.rounds(30)
        for round in 0..<rounds {
            let person = Person(account: Account(balance: 0))
            let shared = UncheckedSendable(person)  // mutated by one task only
            let listeners = _Mutex<[Listener]>((0..<8).map { _ in Listener() })
            let captures = LifetimeCounter()
            var tokens: [ObservationToken] = []
            for listener in listeners.withLock({ $0 }) {
                let captured = Captured(captures)
                tokens.append(
                    person.safeObserve(\.account.balance, by: listener, options: [.old, .new, .prior]) { _, _, _ in
                        _ = captured
                    })
                tokens.append(person.safeObserve(\.fullName, by: listener) { _, _, _ in _ = captured })
            }
            let someTokens = tokens.prefix(6)
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    // The graph's only mutator: changes, and re-targets the chain.
                    for step in 0..<200 {
                        if step % 20 == 0 { shared.value.account = Account(balance: step) }
                        shared.value.account.balance += 1
                        shared.value.first = "n\(step)"
                    }
                }
                group.addTask {
                    for token in someTokens { token.invalidate() }
                }
                group.addTask {
                    let removed = listeners.withLock { Array($0.prefix(4)) }
                    for listener in removed { SafeObservation.removeAll(observedBy: listener) }
                }
                group.addTask {
                    listeners.withLock { $0.removeLast(2) }  // plain listeners die, on this thread
                }
            }
            listeners.withLock { $0.removeAll() }  // the rest die
            person.account.balance += 1  // finds them gone
            person.first = "end"
            #expect(settles { captures.liveCount == 0 }, "round \(round): handlers leaked")
            #expect(watchers(of: person) == 0 && watchers(of: person.account) == 0, "round \(round): still bound")
        }
    }

    @Test func observingAndUnobservingOneChainFromSeveralThreads_isSafe() async {
        let rounds = StressConfig.rounds(20)
        for _ in 0..<rounds {
            let person = Person()
            let shared = UncheckedSendable(person)  // every access below holds `lock`, or is thread-safe API
            let lock = _Mutex(0)
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<4 {
                    group.addTask {
                        let listener = Listener()
                        for step in 0..<40 {
                            // Registration reads the chain: it takes the
                            // graph's lock, like every other read or write.
                            lock.withLock { _ in
                                shared.value.safeObserve(\.account.balance, by: listener) { _, _, _ in }
                                if step % 3 == worker % 3 { shared.value.account.balance += 1 }
                            }
                            if step % 2 == 0 { shared.value.safeUnobserve(\.account.balance, by: listener) }
                        }
                        SafeObservation.removeAll(observedBy: listener)
                    }
                }
            }
            #expect(SafeObservation.relations(of: person).isEmpty)
            #expect(watchers(of: person) == 0 && watchers(of: person.account) == 0, "a dependency is still bound")
        }
    }
}
