// Observing `@Observable` models whose observed values refer to the model or
// to the listener: the relation keeps neither alive, whatever the value holds
// (the documentation's "never keeps the model or the listener alive").

import Observation
import Synchronization
import Testing

@testable import SafeObserve

// MARK: - Fixtures

/// A model whose key paths read values that refer back to it.
@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class SelfReferring: @unchecked Sendable {
    var tick = 0
    var name = "a"
    var tagged = Tagged(name: "a", tag: nil)
    @ObservationIgnored weak var _friend: ValueListener?
    @ObservationIgnored let lifetime: LifetimeCounter

    /// The model itself, tracked through `tick`.
    var me: SelfReferring {
        _ = tick
        return self
    }
    /// A value holding the model.
    var pair: Pair { Pair(model: self, tick: tick) }
    /// A value holding the listener, which the model holds weakly.
    var friend: Friendship { Friendship(listener: _friend, tick: tick) }

    init(lifetime: LifetimeCounter) {
        self.lifetime = lifetime
        lifetime.didInit()
    }
    deinit { lifetime.didDeinit() }
}

private struct Pair {
    let model: SelfReferring
    let tick: Int
}

/// A value that may hold a reference (so SafeObserve keeps it from a change
/// to the job that tells it only), told apart by its name.
private struct Tagged: Equatable, Sendable {
    let name: String
    let tag: Tag?

    static func == (a: Tagged, b: Tagged) -> Bool { a.name == b.name && a.tag === b.tag }
}

private final class Tag: Sendable {}

private struct Friendship {
    let listener: ValueListener?
    let tick: Int
}

/// A tree whose nodes hold their children and refer to their parent weakly.
@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class TreeNode: @unchecked Sendable {
    weak var parent: TreeNode?
    var children: [TreeNode] = []
    @ObservationIgnored let lifetime: LifetimeCounter

    /// The tree's root, which holds this node.
    var root: TreeNode { parent?.root ?? self }

    init(lifetime: LifetimeCounter) {
        self.lifetime = lifetime
        lifetime.didInit()
    }
    deinit { lifetime.didDeinit() }
}

/// A non-final `@Observable` class, observed through a subclass that
/// overrides a computed property to return a value holding the model.
@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private class BaseModel: @unchecked Sendable {
    var tick = 0
    @ObservationIgnored let lifetime: LifetimeCounter
    /// Nothing of the model, in the base class.
    var snapshot: [AnyObject] {
        _ = tick
        return []
    }

    init(lifetime: LifetimeCounter) {
        self.lifetime = lifetime
        lifetime.didInit()
    }
    deinit { lifetime.didDeinit() }
}

// @unchecked Sendable: as its base class.
private final class DerivedModel: BaseModel, @unchecked Sendable {
    /// The model itself, in an array.
    override var snapshot: [AnyObject] {
        _ = tick
        return [self]
    }
}

/// A model whose computed key paths read a value made anew at each read.
@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class ReadsAnew: @unchecked Sendable {
    var tick = 0
    /// A new array of a class instance, told apart by identity only.
    var boxes: [ValueListener] {
        _ = tick
        return [ValueListener(lifetime: LifetimeCounter())]
    }
    /// A trivial value that differs at each read.
    var roll: Int {
        _ = tick
        return Int.random(in: 0..<Int.max)
    }
}

/// A model that lives for the whole process, whose value refers to the
/// listener.
private enum Shared {
    static let model = SelfReferring(lifetime: LifetimeCounter())
}

/// Observes any `Observable` class's key path, in generic code.
private func observeGenerically<Model: Observable & AnyObject & Sendable, Value>(
    _ model: Model, _ keyPath: any KeyPath<Model, Value> & Sendable, by listener: AnyObject,
    options: ObservationOptions
) -> ObservationToken {
    model.safeObserve(keyPath, by: listener, options: options, isolation: nil) { _, _, _ in }
}

private final class ValueListener: Sendable {
    let lifetime: LifetimeCounter
    init(lifetime: LifetimeCounter) {
        self.lifetime = lifetime
        lifetime.didInit()
    }
    deinit { lifetime.didDeinit() }
}

/// Whether `condition` holds within two seconds.
///
/// Not at once: a delivery that is running holds the model and the listener
/// for its handler's call, and one that waits for its job holds a value that
/// refers to them until it has run (the documented exceptions; a test that
/// drops the model right after its last counted call can race either). With
/// the before-the-store tracking, its verifications also keep the value a
/// job told, or a first registration read, for about 100 ms.
/// Waits by sleeping, so that those jobs and tasks run meanwhile.
private func holdsPromptly(isolation: isolated (any Actor)? = #isolation, _ condition: () -> Bool) async -> Bool {
    for _ in 0..<200 {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}

// MARK: - Tests

@Suite("Observing @Observable models: values that refer to the model or the listener")
struct ObservableModelValueLifetimeTests {
    /// The options each shape is registered with: with and without the old
    /// value, which is what the relation would have to keep.
    static let optionSets: [ObservationOptions] = [[.new], [.old, .new], [.initial, .old, .new]]

    @Test(arguments: optionSets)
    func aValueThatIsTheModel_keepsItNotAlive(options: ObservationOptions) async {
        let models = LifetimeCounter()
        let listener = ValueListener(lifetime: LifetimeCounter())
        var model: SelfReferring? = SelfReferring(lifetime: models)
        let token = model!.safeObserve(\.me, by: listener, options: options, isolation: nil) { _, _, _ in }
        model = nil
        #expect(await holdsPromptly { models.liveCount == 0 }, "a relation on \\.me kept its model alive")
        #expect(await eventually { !token.isActive })
    }

    @Test(arguments: optionSets)
    func aValueHoldingTheModel_keepsItNotAlive_afterChanges(options: ObservationOptions) async {
        let models = LifetimeCounter()
        let listener = ValueListener(lifetime: LifetimeCounter())
        var model: SelfReferring? = SelfReferring(lifetime: models)
        let calls = Atomic<Int>(0)
        let token = model!.safeObserve(\.pair, by: listener, options: options, isolation: nil) { _, _, change in
            if !change.isInitial { calls.add(1, ordering: .relaxed) }
        }
        for tick in 1...3 {
            model!.tick = tick
            #expect(await eventually { calls.load(ordering: .relaxed) >= tick })
        }
        model = nil
        #expect(
            await holdsPromptly { models.liveCount == 0 }, "a relation on \\.pair kept its model alive after delivering"
        )
        #expect(await eventually { !token.isActive })
    }

    /// A main-actor handler, the common case. With no change waiting, the
    /// model dies when dropped; with one waiting, the value read before it
    /// (the change's old value) keeps the model until the delivery has run,
    /// and no longer.
    @MainActor
    @Test func aValueHoldingTheModel_onTheMainActor_keepsItNotAlive() async {
        let models = LifetimeCounter()
        let listener = ValueListener(lifetime: LifetimeCounter())
        var model: SelfReferring? = SelfReferring(lifetime: models)
        var received: [Int] = []
        let token = model!.safeObserve(\.pair, by: listener, options: [.old, .new]) { _, model, change in
            received.append(change.newValue?.tick ?? -1)
            #expect(change.oldValue?.tick == received.count - 1 && change.newValue?.model === model)
        }
        model!.tick = 1
        #expect(await eventually { received == [1] })
        weak let weakModel = model
        model = nil
        #expect(
            await holdsPromptly { models.liveCount == 0 && weakModel == nil }, "an idle relation kept the model alive")
        #expect(await eventually { !token.isActive })

        model = SelfReferring(lifetime: models)
        let second = model!.safeObserve(\.pair, by: listener, options: [.old, .new]) { _, model, change in
            received.append(change.newValue?.tick ?? -1)
        }
        model!.tick = 2
        model = nil
        #expect(await eventually { models.liveCount == 0 }, "the waiting delivery kept the model alive after it ran")
        #expect(await eventually { !second.isActive })
        #expect(received.count <= 2)
    }

    @Test(arguments: optionSets)
    func aTreesRoot_dies_whenDropped(options: ObservationOptions) async {
        let nodes = LifetimeCounter()
        let listener = ValueListener(lifetime: LifetimeCounter())
        var root: TreeNode? = TreeNode(lifetime: nodes)
        weak var leaf: TreeNode?
        do {
            let child = TreeNode(lifetime: nodes)
            child.parent = root
            root!.children.append(child)
            leaf = child
        }
        let token = leaf!.safeObserve(\.root, by: listener, options: options, isolation: nil) { _, _, _ in }
        root = nil
        #expect(
            await holdsPromptly { nodes.liveCount == 0 && leaf == nil }, "a relation on \\.root kept the tree alive")
        #expect(await eventually { !token.isActive })
    }

    @Test(arguments: optionSets)
    func aValueThatIsTheListener_keepsItNotAlive(options: ObservationOptions) async {
        let listeners = LifetimeCounter()
        let model = SelfReferring(lifetime: LifetimeCounter())
        var listener: ValueListener? = ValueListener(lifetime: listeners)
        model._friend = listener
        let calls = Atomic<Int>(0)
        let token = model.safeObserve(\.friend, by: listener!, options: options, isolation: nil) { _, _, _ in
            calls.add(1, ordering: .relaxed)
        }
        model.tick = 1
        #expect(await eventually { calls.load(ordering: .relaxed) >= (options.contains(.initial) ? 2 : 1) })
        listener = nil
        #expect(await holdsPromptly { listeners.liveCount == 0 }, "a relation on \\.friend kept its listener alive")
        model.tick = 2
        #expect(await eventually { !token.isActive })
    }

    /// Past the verifications of the before-the-store tracking (and with
    /// the after-the-store one at once): a model that was told changes and
    /// then left alone dies when dropped.
    @Test func aModelLeftAloneAfterItsChanges_diesWhenDropped() async {
        let models = LifetimeCounter()
        let listener = ValueListener(lifetime: LifetimeCounter())
        var model: SelfReferring? = SelfReferring(lifetime: models)
        let calls = Atomic<Int>(0)
        let token = model!.safeObserve(\.pair, by: listener, options: [.old, .new], isolation: nil) { _, _, _ in
            calls.add(1, ordering: .relaxed)
        }
        model!.tick = 1
        #expect(await eventually { calls.load(ordering: .relaxed) == 1 })
        try? await Task.sleep(for: .milliseconds(400))
        model = nil
        #expect(await holdsPromptly { models.liveCount == 0 }, "the model outlived its relation's verifications")
        withExtendedLifetime(token) {}
    }

    /// A handler that registers another relation with `.initial` on the
    /// same key path while its delivery runs: the new relation keeps
    /// nothing once no job is due.
    @Test func aRegistrationMadeByAHandler_keepsNothingOfItsValue() async {
        let models = LifetimeCounter()
        let first = ValueListener(lifetime: LifetimeCounter())
        let second = ValueListener(lifetime: LifetimeCounter())
        var model: SelfReferring? = SelfReferring(lifetime: models)
        let tokens = _Mutex<[ObservationToken]>([])
        let calls = Atomic<Int>(0)
        let token = model!.safeObserve(\.pair, by: first, options: [.new], isolation: nil) { _, model, _ in
            calls.add(1, ordering: .relaxed)
            let made = model.safeObserve(\.pair, by: second, options: [.initial, .new], isolation: nil) { _, _, _ in }
            tokens.withLock { $0.append(made) }
        }
        model!.tick = 1
        #expect(await eventually { calls.load(ordering: .relaxed) == 1 })
        try? await Task.sleep(for: .milliseconds(400))
        model = nil
        #expect(await holdsPromptly { models.liveCount == 0 }, "the handler's registration kept the model alive")
        withExtendedLifetime((token, tokens)) {}
    }

    /// A subclass overriding a computed property of its `@Observable` base
    /// class, observed through the base class's key path and its own, as
    /// the subclass and as the base class, from generic code too.
    @Test(arguments: optionSets)
    func aSubclassModel_whoseValueHoldsIt_diesWhenDropped(options: ObservationOptions) async {
        let models = LifetimeCounter()
        let listener = ValueListener(lifetime: LifetimeCounter())
        let calls = Atomic<Int>(0)
        var model: DerivedModel? = DerivedModel(lifetime: models)
        let tokens = [
            model!.safeObserve(\.snapshot, by: listener, options: options, isolation: nil) { _, model, change in
                #expect(change.newValue?.first === model)
                calls.add(1, ordering: .relaxed)
            },
            (model! as BaseModel).safeObserve(\BaseModel.snapshot, by: listener, options: options, isolation: nil) {
                _, _, _ in calls.add(1, ordering: .relaxed)
            },
            observeGenerically(model!, \DerivedModel.snapshot, by: listener, options: options),
        ]
        model!.tick = 1
        #expect(await eventually { calls.load(ordering: .relaxed) >= (options.contains(.initial) ? 4 : 2) })
        model = nil
        #expect(
            await holdsPromptly { models.liveCount == 0 },
            "a relation on an overriding \\.snapshot kept its model alive")
        #expect(await eventually { tokens.allSatisfy { !$0.isActive } })
    }

    /// A model in a static property, which never dies: the listener its
    /// value refers to dies when dropped, and its relation ends then.
    @Test func aStaticModelsValue_keepsNotItsListenerAlive() async {
        let listeners = LifetimeCounter()
        let model = Shared.model
        var listener: ValueListener? = ValueListener(lifetime: listeners)
        model._friend = listener
        let calls = Atomic<Int>(0)
        let token = model.safeObserve(\.friend, by: listener!, options: [.initial, .old, .new], isolation: nil) {
            _, _, change in
            if !change.isInitial { calls.add(1, ordering: .relaxed) }
        }
        model.tick += 1
        #expect(await eventually { calls.load(ordering: .relaxed) == 1 })
        listener = nil
        #expect(await holdsPromptly { listeners.liveCount == 0 }, "a static model's relation kept its listener alive")
        model.tick += 1
        #expect(await eventually { !token.isActive })
    }

    @Test func anInvalidatedRelation_keepsNothingOfItsValue() async {
        let models = LifetimeCounter()
        let listener = ValueListener(lifetime: LifetimeCounter())
        var model: SelfReferring? = SelfReferring(lifetime: models)
        let token = model!.safeObserve(\.pair, by: listener, options: [.old, .new], isolation: nil) { _, _, _ in }
        token.invalidate()
        model = nil
        #expect(
            await holdsPromptly { models.liveCount == 0 },
            "an invalidated relation kept its model alive until its next change")
    }

    /// A computed key path whose value, compared by identity, is new at each
    /// read: each change is told once, nothing is told unasked, and no job
    /// runs without end (each read after a job's would otherwise differ).
    @Test(arguments: [false, true])
    func aValueMadeAnewAtEachRead_isToldEachChangeOnce(onTheMainActor: Bool) async {
        let models = LifetimeCounter()
        let listener = ValueListener(lifetime: LifetimeCounter())
        let calls = Atomic<Int>(0)
        var model: ReadsAnew? = ReadsAnew()
        let token: ObservationToken
        if onTheMainActor {
            token = await MainActor.run { [model] in
                model!.safeObserve(\.boxes, by: listener, options: [.old, .new]) { _, _, _ in
                    calls.add(1, ordering: .relaxed)
                }
            }
        } else {
            token = model!.safeObserve(\.boxes, by: listener, options: [.old, .new], isolation: nil) { _, _, _ in
                calls.add(1, ordering: .relaxed)
            }
        }
        try? await Task.sleep(for: .milliseconds(300))
        #expect(calls.load(ordering: .relaxed) == 0, "told a change nobody made")
        for tick in 1...3 {
            model!.tick = tick
            #expect(await eventually { calls.load(ordering: .relaxed) >= tick })
            try? await Task.sleep(for: .milliseconds(200))
            #expect(calls.load(ordering: .relaxed) == tick, "one change told \(calls.load(ordering: .relaxed)) times")
        }
        weak let weakModel = model
        model = nil
        #expect(await holdsPromptly { weakModel == nil }, "jobs without end kept the model alive")
        #expect(await eventually { !token.isActive })
        _ = models
    }

    /// A trivial value that differs at each read (a random number): a
    /// change runs a bounded number of jobs, then none.
    @Test func aValueThatDiffersAtEachRead_runsBoundedJobs() async {
        let listener = ValueListener(lifetime: LifetimeCounter())
        let calls = Atomic<Int>(0)
        let model = ReadsAnew()
        let token = model.safeObserve(\.roll, by: listener, options: [.new], isolation: nil) { _, _, _ in
            calls.add(1, ordering: .relaxed)
        }
        model.tick = 1
        #expect(await eventually { calls.load(ordering: .relaxed) >= 1 })
        // Bounded, not timed: jobs without end would be told thousands of
        // times a second.
        for _ in 0..<2 {
            try? await Task.sleep(for: .seconds(1))
            #expect(calls.load(ordering: .relaxed) <= 5, "one change told \(calls.load(ordering: .relaxed)) times")
        }
        withExtendedLifetime(token) {}
    }

    /// What the relation no longer keeps does not cost it its old values: a
    /// value with references is chained as an `Int` is, under changes from
    /// another thread.
    @Test func oldValues_ofAValueWithReferences_chain() async {
        let model = SelfReferring(lifetime: LifetimeCounter())
        let listener = ValueListener(lifetime: LifetimeCounter())
        let received = _Mutex<[ObservedChange<String>]>([])
        let token = model.safeObserve(\.tagged, by: listener, options: [.initial, .old, .new], isolation: nil) {
            _, _, change in
            received.withLock { $0.append(change.names) }
        }
        let tag = Tag()
        stressRunConcurrently([{ for index in 1...300 { model.tagged = Tagged(name: "v\(index)", tag: tag) } }])
        #expect(await eventually { received.withLock { $0.last?.newValue } == "v300" })
        let changes = received.withLock { $0 }
        #expect(changes.first?.isInitial == true)
        var expected = changes.first?.newValue
        for change in changes.dropFirst() {
            #expect(
                change.oldValue == expected,
                "old value \(String(describing: change.oldValue)) after \(String(describing: expected))")
            #expect(change.newValue != change.oldValue, "a delivery with no change")
            expected = change.newValue
        }
        withExtendedLifetime(token) {}
    }
}

// MARK: - Old values under writers on other threads

/// A model whose properties are behind a lock, so that the writers, the
/// read before each change and the delivery's read do not race: a `String`,
/// which SafeObserve keeps from change to change, and a value that may hold
/// a reference, which it does not.
@Observable
private final class LockedName: Sendable {
    @ObservationIgnored private let storage = _Mutex("v0")
    @ObservationIgnored private let countStorage = _Mutex(0)
    @ObservationIgnored private let taggedStorage = _Mutex(Tagged(name: "v0", tag: nil))

    var name: String {
        get {
            access(keyPath: \.name)
            return storage.withLock { $0 }
        }
        set {
            withMutation(keyPath: \.name) { storage.withLock { $0 = newValue } }
        }
    }

    var count: Int {
        get {
            access(keyPath: \.count)
            return countStorage.withLock { $0 }
        }
        set {
            withMutation(keyPath: \.count) { countStorage.withLock { $0 = newValue } }
        }
    }

    var tagged: Tagged {
        get {
            access(keyPath: \.tagged)
            return taggedStorage.withLock { $0 }
        }
        set {
            withMutation(keyPath: \.tagged) { taggedStorage.withLock { $0 = newValue } }
        }
    }

    /// `tagged`, read through a computed property: each delivery tracks it
    /// anew (its report names `tagged`, not this key path).
    var taggedView: Tagged { tagged }

    /// Sets the value of `kind` to one named `name` (for `.trivial`, a
    /// name that is a number).
    func set(_ kind: ValueKind, to name: String, tag: Tag) {
        switch kind {
        case .trivial: count = Int(name) ?? -1
        case .string: self.name = name
        case .withReferences, .withReferencesThroughAComputedProperty: tagged = Tagged(name: name, tag: tag)
        }
    }

    /// Observes the value of `kind`, told by name.
    func observe(
        _ kind: ValueKind, by listener: ValueListener, options: ObservationOptions, isolation: isolated (any Actor)?,
        _ handler: @escaping @Sendable (ObservedChange<String>) -> Void
    ) -> ObservationToken {
        switch kind {
        case .trivial:
            safeObserve(\.count, by: listener, options: options, isolation: isolation) { _, _, change in
                handler(
                    ObservedChange<String>(
                        newValue: change.newValue.map(String.init), oldValue: change.oldValue.map(String.init),
                        isPrior: change.isPrior, isInitial: change.isInitial))
            }
        case .string:
            safeObserve(\.name, by: listener, options: options, isolation: isolation) { _, _, change in
                handler(change)
            }
        case .withReferences:
            safeObserve(\.tagged, by: listener, options: options, isolation: isolation) { _, _, change in
                handler(change.names)
            }
        case .withReferencesThroughAComputedProperty:
            safeObserve(\.taggedView, by: listener, options: options, isolation: isolation) { _, _, change in
                handler(change.names)
            }
        }
    }
}

/// The kinds of values SafeObserve keeps differently.
enum ValueKind: Sendable {
    /// An `Int`, a trivial value: kept from change to change.
    case trivial
    /// A `String`: kept from change to change.
    case string
    /// A value that may hold a reference: kept from a change to its job.
    case withReferences
    /// The same, through a computed property: tracked anew at each job.
    case withReferencesThroughAComputedProperty
}

extension ObservedChange<Tagged> {
    /// The change, by the values' names.
    fileprivate var names: ObservedChange<String> {
        ObservedChange<String>(
            newValue: newValue?.name, oldValue: oldValue?.name, isPrior: isPrior, isInitial: isInitial)
    }
}

/// What one relation was told.
private final class ToldNames: Sendable {
    private let changes = _Mutex<[ObservedChange<String>]>([])
    func append(_ change: ObservedChange<String>) { changes.withLock { $0.append(change) } }
    var all: [ObservedChange<String>] { changes.withLock { $0 } }

    /// The problems against the chaining rule: `.initial` first, each old
    /// value the previous new value, no unchanged value, ending at `last`.
    /// With `allowingMissing`, a missing old value is allowed (documented
    /// for a value that may hold references): a change that began on the
    /// writer's thread while the first tracking was being installed, whose
    /// value before it no tracking read. A wrong one never is.
    func problems(endingAt last: String, allowingMissing: Bool) -> [String] {
        let all = all
        guard let first = all.first, first.isInitial, var expected = first.newValue else {
            return ["no .initial first: \(all.prefix(2))"]
        }
        var problems: [String] = []
        for (index, change) in all.enumerated().dropFirst() {
            if change.isInitial { problems.append("#\(index): a second .initial") }
            if change.oldValue != expected, change.oldValue != nil || !allowingMissing {
                problems.append("#\(index): old \(change.oldValue ?? "nil") after \(expected)")
            }
            if change.oldValue == change.newValue { problems.append("#\(index): unchanged \(expected)") }
            expected = change.newValue ?? "nil"
        }
        if expected != last { problems.append("ends at \(expected), not \(last)") }
        return problems
    }
}

extension ObservableModelValueLifetimeTests {
    /// Relations registered while another thread writes, nonisolated and on
    /// the main actor: each is told `.initial`, then changes chained from
    /// it, with no unchanged value, up to the last store; a `String` (kept
    /// from change to change) with no old value missing. Looped: the
    /// windows between a change's `willSet`, its store and the delivery's
    /// read are hit by chance.
    @Test(.serialized, arguments: [ValueKind.string, .withReferences, .withReferencesThroughAComputedProperty])
    func registrationsDuringABurst_areChained_fromTheirInitialValue(kind: ValueKind) async {
        for _ in 0..<20 {
            let model = LockedName()
            let tag = Tag()
            // One per relation: a listener has one relation per key path.
            let listeners = (0..<6).map { _ in ValueListener(lifetime: LifetimeCounter()) }
            let writer = Task.detached {
                for index in 1...2_000 {
                    model.set(kind, to: "v\(index)", tag: tag)
                    if index % 200 == 0 { await Task.yield() }
                }
            }
            var logs: [ToldNames] = []
            var tokens: [ObservationToken] = []
            for (index, listener) in listeners.enumerated() {
                let told = ToldNames()
                logs.append(told)
                if index.isMultiple(of: 2) {
                    tokens.append(
                        model.observe(kind, by: listener, options: [.initial, .old, .new], isolation: nil) {
                            told.append($0)
                        })
                } else {
                    tokens.append(
                        await MainActor.run {
                            model.observe(
                                kind, by: listener, options: [.initial, .old, .new], isolation: MainActor.shared
                            ) {
                                told.append($0)
                            }
                        })
                }
                await Task.yield()
            }
            await writer.value
            for (index, told) in logs.enumerated() {
                #expect(await eventually { told.all.last?.newValue == "v2000" })
                let problems = told.problems(endingAt: "v2000", allowingMissing: kind != .string)
                #expect(problems.isEmpty, "relation \(index): \(problems.prefix(4))")
            }
            withExtendedLifetime((tokens, listeners)) {}
        }
    }
}

// MARK: - Trivial values under several writers

/// The tests whose two writer threads change a value without pause: one at a
/// time, so that their threads do not starve the rest of a parallel run.
@Suite("Observing @Observable models: old values under two writer threads", .serialized)
struct ObservableModelOldValuesUnderWritersTests {
    /// A trivial value is kept from change to change (documented): its old
    /// values chain even while two threads change it at once and relations
    /// come and go.
    @Test func oldValues_ofATrivialValue_chain_underTwoWriters_whileRelationsComeAndGo() async {
        let (problems, deliveries) = await churnUnderTwoWriters(.trivial, rounds: 30, anchored: false)
        #expect(deliveries > 30, "the writers' changes were told \(deliveries) times")
        #expect(problems.isEmpty, "\(problems.count) broken links: \(problems.prefix(4))")
    }
}

// MARK: - Other values under several writers

/// The links of `changes` that break the chain (each old value the previous
/// new value, and no change told twice in a row), labelled with `label`.
private func brokenLinks(_ changes: [ObservedChange<String>], _ label: String) -> [String] {
    var problems: [String] = []
    var expected: String?
    for (index, change) in changes.enumerated() {
        if let expected, change.oldValue != expected {
            problems.append("\(label) #\(index): old \(change.oldValue ?? "nil") after \(expected)")
        }
        if let expected, change.newValue == expected { problems.append("\(label) #\(index): \(expected) again") }
        expected = change.newValue
    }
    return problems
}

/// Registers a relation on the value of `kind` `rounds` times, nonisolated,
/// for 5 ms each (half of them with `.initial`), while two threads change
/// the value: the links that break the chains, and the deliveries. With
/// `anchored`, a relation registered before the writers start keeps the
/// key path's tracker for the whole run (and is checked too).
private func churnUnderTwoWriters(
    _ kind: ValueKind, rounds: Int, anchored: Bool
) async -> (problems: [String], deliveries: Int) {
    let model = LockedName()
    let tag = Tag()
    let anchorListener = ValueListener(lifetime: LifetimeCounter())
    let anchorTold = _Mutex<[ObservedChange<String>]>([])
    let anchor =
        anchored
        ? model.observe(kind, by: anchorListener, options: [.old, .new], isolation: nil) { change in
            anchorTold.withLock { $0.append(change) }
        } : nil
    let stop = Atomic<Bool>(false)
    let writers = Task {
        await stressRunConcurrentlyOffThePool(
            (1...2).map { thread in
                {
                    var index = 0
                    while !stop.load(ordering: .relaxed) {
                        index += 1
                        let name = kind == .trivial ? "\(thread * 1_000_000_000 + index)" : "t\(thread)-\(index)"
                        model.set(kind, to: name, tag: tag)
                        if index.isMultiple(of: 32) { stressBreathe() }
                    }
                }
            })
    }
    var problems: [String] = []
    var deliveries = 0
    for round in 0..<rounds {
        let listener = ValueListener(lifetime: LifetimeCounter())
        let told = _Mutex<[ObservedChange<String>]>([])
        let options: ObservationOptions = round.isMultiple(of: 2) ? [.initial, .old, .new] : [.old, .new]
        let token = model.observe(kind, by: listener, options: options, isolation: nil) { change in
            told.withLock { $0.append(change) }
        }
        try? await Task.sleep(for: .milliseconds(5))
        token.invalidate()
        let changes = told.withLock { $0 }
        deliveries += changes.count
        problems += brokenLinks(changes, "round \(round)")
    }
    stop.store(true, ordering: .relaxed)
    await writers.value
    anchor?.invalidate()
    problems += brokenLinks(anchorTold.withLock { $0 }, "anchor")
    withExtendedLifetime(anchorListener) {}
    return (problems, deliveries)
}

extension ObservableModelOldValuesUnderWritersTests {
    /// A `String` holds no reference to anything of the user's, so it is kept
    /// from change to change as a trivial value is (documented): its old
    /// values chain even while two threads change it at once and relations
    /// come and go, each relation's tracker made anew.
    @Test func oldValues_ofAString_chain_underTwoWriters_whileRelationsComeAndGo() async {
        let (problems, deliveries) = await churnUnderTwoWriters(.string, rounds: 30, anchored: false)
        #expect(deliveries > 30, "the writers' changes were told \(deliveries) times")
        #expect(problems.isEmpty, "\(problems.count) broken links: \(problems.prefix(4))")
    }

    /// A value that may hold references is read at each change's `willSet`,
    /// on the writer's thread. While the key path's tracker lives (a
    /// relation keeps it), its old values chain too, under two threads
    /// changing it at once and relations coming and going: a read that
    /// another thread's store overtook, or that a job began after, is not
    /// taken, and a change reported to two trackings is told once.
    @Test(arguments: [ValueKind.withReferences, .withReferencesThroughAComputedProperty])
    func oldValues_ofAValueWithReferences_chain_underTwoWriters_whileTheTrackerLives(kind: ValueKind) async {
        let (problems, deliveries) = await churnUnderTwoWriters(kind, rounds: 30, anchored: true)
        #expect(deliveries > 30, "the writers' changes were told \(deliveries) times")
        #expect(problems.isEmpty, "\(problems.count) broken links: \(problems.prefix(4))")
    }
}

// MARK: - A change begun before the first relation

/// Holds the first thread that passes it once armed, until opened.
private final class Pause: Sendable {
    private let state = _Mutex((armed: false, held: false, open: false))

    func arm() { state.withLock { $0.armed = true } }
    func open() { state.withLock { $0.open = true } }
    var isHeld: Bool { state.withLock { $0.held && !$0.open } }

    func holdIfArmed() {
        let holds = state.withLock { state in
            defer { state.armed = false }
            state.held = state.held || state.armed
            return state.armed
        }
        if holds { _ = settles(within: 60) { state.withLock { $0.open } } }
    }
}

/// A model whose setter can hold the thread that passes first once armed:
/// after `willSet`, before the store; or after the store, before `didSet`.
@Observable
private final class PausableTagged: Sendable {
    @ObservationIgnored private let storage = _Mutex(Tagged(name: "v0", tag: nil))
    @ObservationIgnored let beforeStore = Pause()
    @ObservationIgnored let beforeReport = Pause()

    var tagged: Tagged {
        get {
            access(keyPath: \.tagged)
            return storage.withLock { $0 }
        }
        set {
            withMutation(keyPath: \.tagged) {
                beforeStore.holdIfArmed()
                storage.withLock { $0 = newValue }
                beforeReport.holdIfArmed()
            }
        }
    }
}

extension ObservableModelValueLifetimeTests {
    /// Thread A begins a change before the key path's first relation
    /// registers (no tracking sees its `willSet`) and stores it after; thread
    /// B then changes the value, and its `willSet` reads A's value, which
    /// the relation was never told. A's report, with no `willSet` seen on
    /// its thread, says the old value is unknown: the delivery has no old
    /// value (documented), never A's value as a wrong one. Held on the main
    /// actor throughout, so the delivery runs after both reports.
    @MainActor
    @Test func aChangeBegunBeforeTheFirstRelation_isToldWithNoOldValue_notAnUntoldOne() async {
        let model = PausableTagged()
        let tag = Tag()
        let listener = ValueListener(lifetime: LifetimeCounter())
        model.beforeStore.arm()
        let writerA = stressStartThread { model.tagged = Tagged(name: "a", tag: tag) }
        #expect(settles(within: 60) { model.beforeStore.isHeld })
        var told: [ObservedChange<Tagged>] = []
        let token = model.safeObserve(\.tagged, by: listener, options: [.initial, .old, .new]) { _, _, change in
            told.append(change)
        }
        model.beforeReport.arm()
        model.beforeStore.open()
        guard settles(within: 60, { model.beforeReport.isHeld }) else {
            // Not held: thread B would be, with the main actor waiting for it.
            model.beforeReport.open()
            stressJoin(writerA)
            Issue.record("thread A never reached its report")
            return withExtendedLifetime(token) {}
        }
        stressJoin(stressStartThread { model.tagged = Tagged(name: "b", tag: tag) })
        model.beforeReport.open()
        stressJoin(writerA)
        #expect(await eventually { told.last?.newValue?.name == "b" })
        let names = told.map { "\($0.oldValue?.name ?? "nil") → \($0.newValue?.name ?? "nil")" }
        #expect(told.first?.isInitial == true && told.first?.newValue?.name == "v0", "\(names)")
        for (previous, change) in zip(told, told.dropFirst()) {
            #expect(change.oldValue == nil || change.oldValue == previous.newValue, "\(names)")
        }
        withExtendedLifetime(token) {}
    }
}

extension ObservableModelValueLifetimeTests {
    /// The values kept from change to change (documented): those that can
    /// reach none of the user's objects. Anything that may refer to a class
    /// instance is not.
    @Test func theValuesKeptFromChangeToChange_areThoseThatReachNoUsersObject() {
        let kept: [Any.Type] = [
            Int.self, Double?.self, Bool.self, String.self,
            Substring.self, Character.self, String?.self, [String].self, ContiguousArray<Int>.self,
            ArraySlice<String>.self, Set<String>.self, [String: [String?]].self, [Int: Set<Int>].self,
        ]
        for type in kept { #expect(_holdsNoUserReferences(type), "\(type)") }
        let notKept: [Any.Type] = [
            ValueListener.self, ValueListener?.self, [ValueListener].self, [AnyObject].self, Any.self,
            [Any].self, [String: ValueListener].self, Pair.self, Tagged.self, [Tagged].self,
            (any Sendable).self, Result<Int, any Error>.self,
        ]
        for type in notKept { #expect(!_holdsNoUserReferences(type), "\(type)") }
    }
}
