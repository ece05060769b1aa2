import Synchronization
import Testing

@testable import SafeObserve

/// A reference a handler clears (to release what it holds mid-delivery).
// @unchecked Sendable: touched only on the test's own thread.
private final class Holder<Value: AnyObject>: @unchecked Sendable {
    var value: Value?
}

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
        let counter = Counter()
        let holder = Holder<OptInListener>()
        let listeners = LifetimeCounter()
        let log = EventLog()
        holder.value = OptInListener(lifetime: listeners)
        counter.safeObserve(\.count, by: holder.value!) { _, _, change in
            log.record("\(change.newValue!)")
            holder.value = nil  // still alive until this handler returns
        }
        counter.count = 1
        #expect(listeners.liveCount == 0, "Listener leaked")
        counter.count = 2
        #expect(log.entries == ["1"])
    }

    @Test func releasingTheObservedObjectInsideAHandler_isSafe() {
        let holder = Holder<Counter>()
        let counters = LifetimeCounter()
        let listener = Listener()
        let log = EventLog()
        holder.value = Counter(lifetime: counters)
        holder.value!.safeObserve(\.count, by: listener) { _, _, _ in
            log.record("a")
            holder.value = nil
        }
        let other = Listener()
        holder.value!.safeObserve(\.count, by: other, options: [.old]) { _, counter, _ in
            log.record("b \(counter.count)")
        }
        holder.value!.count = 1
        #expect(counters.liveCount == 0, "Observed object leaked")
        #expect(log.entries == ["a", "b 1"], "the change being delivered completes")
        #expect(SafeObservation.relations(observedBy: other).isEmpty)
        #expect(SafeObservation.relations(observedBy: listener).isEmpty)
    }

    /// The emission does not retain the object: the caller's reference
    /// keeps it for the setter, however the caller reached it (a weak or an
    /// unowned reference is loaded strongly for the call). Under ASan, a
    /// delivery to a freed object would be reported.
    @Test(arguments: ["weak", "unowned", "in-place"])
    func releasingTheObservedObjectInsideAHandler_throughAWeakOrUnownedReference_isSafe(reference: String) {
        let holder = Holder<Counter>()
        let counters = LifetimeCounter()
        let first = Listener()
        let second = Listener()
        let log = EventLog()
        holder.value = Counter(lifetime: counters)
        holder.value!.safeObserve(\.count, by: first) { _, _, _ in holder.value = nil }
        holder.value!.safeObserve(\.count, by: second, options: [.old, .new]) { _, counter, change in
            log.record("\(change.oldValue!)->\(change.newValue!) \(counter.count)")
        }
        switch reference {
        case "weak":
            weak let counter = holder.value
            counter?.count = 1
        case "unowned":
            unowned let counter = holder.value!
            counter.count = 1
        default:
            holder.value!.count += 1
        }
        #expect(counters.liveCount == 0, "the object outlived the change")
        #expect(log.entries == ["0->1 1"], "the change being delivered completes")
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
        withExtendedLifetime(listeners) {}  // optimized builds may release them after their last use
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

/// A handler that changes the property it observes never makes a later
/// relation see values go back: each relation is told the changes of a
/// property in the order they were stored, so the last new value it is told
/// is the current one. (KVO tells later observers `2→3`, `1→2`, `0→1`.)
@Suite("Nested changes never reach a relation out of order")
struct NestedChangeOrderTests {
    @Test(arguments: [false, true])
    func aLaterListener_isToldEachNestedChange_andNeverAnOlderOneAfterANewerOne(inPlace: Bool) {
        let counter = Counter()
        let mutating = Listener()
        let later = Listener()
        counter.safeObserve(\.count, by: mutating) { _, counter, change in
            guard change.newValue! < 3 else { return }
            if inPlace { counter.count += 1 } else { counter.count = change.newValue! + 1 }
        }
        counter.safeObserve(\.count, by: later, options: [.old, .new]) { later, counter, change in
            later.record("\(change.oldValue!)->\(change.newValue!)")
        }
        counter.count = 1
        #expect(counter.count == 3)
        // Each change, in the order stored: never an older one after a newer
        // one, nor an old value it was not told as new.
        #expect(later.log == ["0->1", "1->2", "2->3"], "out of order, or not chained: \(later.log)")
    }

    @Test func listenersAfterTheMutatingOne_areToldEveryChange_inOrder_whenTheNewestReachesThem() {
        let counter = Counter()
        let log = EventLog()
        let listeners = (0..<3).map { _ in Listener() }
        for (index, listener) in listeners.enumerated() {
            counter.safeObserve(\.count, by: listener, options: [.old, .new]) { _, counter, change in
                log.record("\(index): \(change.oldValue!)->\(change.newValue!)")
                if index == 1, change.newValue! < 3 { counter.count += 1 }
            }
        }
        counter.count = 1
        #expect(
            log.entries == [
                "0: 0->1", "1: 0->1", "0: 1->2", "1: 1->2", "0: 2->3", "1: 2->3", "2: 0->1", "2: 1->2", "2: 2->3",
            ])
        for index in 0..<3 {
            #expect(log.entries.last { $0.hasPrefix("\(index):") }?.hasSuffix("->3") == true)
        }
        withExtendedLifetime(listeners) {}  // optimized builds may release them after their last use
    }

    @Test func eachNestedChange_isToldAfterItsOwnPrior() {
        let counter = Counter()
        let mutating = Listener()
        let later = Listener()
        counter.safeObserve(\.count, by: mutating) { _, counter, change in
            if change.newValue == 1 { counter.count = 2 }
        }
        counter.safeObserve(\.count, by: later, options: [.old, .new, .prior]) { later, _, change in
            later.record(change.isPrior ? "prior \(change.oldValue!)" : "\(change.oldValue!)->\(change.newValue!)")
        }
        counter.count = 1
        // Each change after its own prior.
        #expect(later.log == ["prior 0", "0->1", "prior 1", "1->2"])
    }

    @Test func aChangeMadeInThePriorPhase_isOverwrittenByTheOuterStore_andThatIsToldLast() {
        let counter = Counter()
        let mutating = Listener()
        let later = Listener()
        counter.safeObserve(\.count, by: mutating, options: [.prior]) { mutating, counter, change in
            guard change.isPrior, mutating.log.isEmpty else { return }
            mutating.record("set")
            counter.count = 10
        }
        counter.safeObserve(\.count, by: later) { later, _, change in later.record("\(change.newValue!)") }
        counter.count = 1
        #expect(counter.count == 1)
        #expect(later.log == ["10", "1"])
    }

    @Test func aLaterListenerOfNewValuesOnly_mayBeToldTheNewestAlone() {
        let counter = Counter()
        let mutating = Listener()
        let later = Listener()
        counter.safeObserve(\.count, by: mutating) { _, counter, change in
            if change.newValue! < 3 { counter.count = change.newValue! + 1 }
        }
        counter.safeObserve(\.count, by: later) { later, _, change in later.record("\(change.newValue!)") }
        counter.count = 1
        // Without old values nothing needs chaining: the skipped changes
        // merge into the newest, and none comes after it.
        #expect(later.log == ["3"])
    }

    @Test func aChangeMadeInThePriorPhase_chainsTheOldValuesOfLaterListeners() {
        let counter = Counter()
        let mutating = Listener()
        let later = Listener()
        counter.safeObserve(\.count, by: mutating, options: [.prior]) { mutating, counter, change in
            guard change.isPrior, mutating.log.isEmpty else { return }
            mutating.record("set")
            counter.count = 10
        }
        counter.safeObserve(\.count, by: later, options: [.old, .new, .prior]) { later, _, change in
            later.record(change.isPrior ? "prior \(change.oldValue!)" : "\(change.oldValue!)->\(change.newValue!)")
        }
        counter.count = 1
        #expect(counter.count == 1)
        // The prior told first stands for the nested change; the outer change
        // starts from the value the nested one stored, after a prior of it.
        #expect(later.log == ["prior 0", "0->10", "prior 10", "10->1"])
    }

    /// Every listener position, mutating in the handler by setting or in
    /// place, with and without `.prior`: each listener's deliveries chain
    /// from the value before the outermost change to the current value, and
    /// each prior is followed by its change.
    @Test(arguments: [false, true], [false, true])
    func nestedChanges_chainEveryListenersDeliveries(inPlace: Bool, withPrior: Bool) {
        for mutatorIndex in 0..<4 {
            let counter = Counter()
            let listeners = (0..<4).map { _ in Listener() }
            var options: ObservationOptions = [.old, .new]
            if withPrior { options.insert(.prior) }
            for (index, listener) in listeners.enumerated() {
                counter.safeObserve(\.count, by: listener, options: options) { listener, counter, change in
                    if change.isPrior {
                        listener.record("prior \(change.oldValue!)")
                        return
                    }
                    listener.record("\(change.oldValue!)->\(change.newValue!)")
                    guard index == mutatorIndex, change.newValue! < 4 else { return }
                    if inPlace { counter.count += 1 } else { counter.count = change.newValue! + 1 }
                }
            }
            counter.count = 1
            #expect(counter.count == 4)
            for (index, listener) in listeners.enumerated() {
                let problems = chainProblems(listener.log, from: 0, to: counter.count, withPrior: withPrior)
                #expect(problems.isEmpty, "listener \(index), mutator \(mutatorIndex): \(problems) in \(listener.log)")
            }
            withExtendedLifetime(listeners) {}
        }
    }

    /// A prior handler changing the property it is told about, once or
    /// more, by setting it or in place: each change it makes is told after
    /// a prior of its own, the outer change gets a prior from the value
    /// stored then, and the outer store is told last.
    @Test(arguments: [1, 2, 3], [false, true])
    func aPriorHandlerChangingItsOwnProperty_getsAPriorBeforeEachChange(budget: Int, inPlace: Bool) {
        let counter = Counter()
        let listener = Listener()
        var remaining = budget
        counter.safeObserve(\.count, by: listener, options: [.old, .new, .prior]) { listener, counter, change in
            guard change.isPrior else {
                listener.record("\(change.oldValue!)->\(change.newValue!)")
                return
            }
            listener.record("prior \(change.oldValue!)")
            guard remaining > 0 else { return }
            remaining -= 1
            if inPlace { counter.count += 1 } else { counter.count = change.oldValue! + 1 }
        }
        if inPlace { counter.count += 10 } else { counter.count = 10 }
        var expected: [String] = []
        for step in 0..<budget { expected += ["prior \(step)", "\(step)->\(step + 1)"] }
        let final = inPlace ? budget + 10 : 10
        expected += ["prior \(budget)", "\(budget)->\(final)"]
        #expect(counter.count == final)
        #expect(listener.log == expected)
    }

    @Test func aChangeOfAnotherProperty_orAnotherObject_isDeliveredAtOnce() {
        let counter = Counter()
        let other = Counter()
        let log = EventLog()
        let second = Listener()
        counter.safeObserve(\.count, by: other) { other, counter, _ in
            counter.title = "changed"
            other.count = 7
        }
        counter.safeObserve(\.count, by: second) { _, _, _ in log.record("count") }
        counter.safeObserve(\.title, by: second) { _, _, _ in log.record("title") }
        other.safeObserve(\.count, by: second) { _, _, _ in log.record("other") }
        counter.count = 1
        #expect(log.entries == ["title", "other", "count"])
    }
}

/// A model whose computed property runs user code each time it is read:
/// SafeObserve evaluates a derived key path outside its locks, so that code
/// may unobserve — and once it did, the relation's handler is never called
/// again, whatever the evaluation was for.
private final class ReadHookModel: SafeObservable, @unchecked Sendable {
    // @unchecked Sendable: used from one test's task at a time.
    @Observed var count = 0
    /// The reads of `watched` so far.
    var reads = 0
    /// Called with each read's number (from 1).
    var onRead: ((Int) -> Void)?
    var watched: Int {
        reads += 1
        onRead?(reads)
        return count
    }
}

@Suite("Re-entrancy inside a key path's evaluation")
struct EvaluationReentrancyTests {
    @Test func unobservingWhileTheOldValueIsEvaluated_deliversNeitherPhase() {
        let model = ReadHookModel()
        let listener = Listener()
        let log = EventLog()
        let token = model.safeObserve(\.watched, by: listener, options: [.old, .new, .prior]) { _, _, change in
            log.record(describe(change))
        }
        model.count = 1
        // The next read is the prior phase's evaluation of the old value.
        model.onRead = { _ in token.invalidate() }
        model.count = 2
        model.onRead = nil
        model.count = 3
        #expect(log.entries == ["0->nil prior", "0->1"])
        #expect(!token.isActive)
        withExtendedLifetime(listener) {}
    }

    @Test func unobservingWhileTheNewValueIsEvaluated_deliversNothing() {
        let model = ReadHookModel()
        let listener = Listener()
        let log = EventLog()
        let token = model.safeObserve(\.watched, by: listener, options: [.new]) { _, _, change in
            log.record(describe(change))
        }
        model.onRead = { [unowned model] _ in model.safeUnobserve(\.watched, by: listener) }
        model.count = 1
        #expect(log.entries.isEmpty)
        #expect(!token.isActive)
        withExtendedLifetime(listener) {}
    }

    // Read 1 resolves the key path; read 2 is the `.initial` value.

    @Test func unobservingWhileTheInitialValueIsEvaluated_deliversNoInitial() {
        let model = ReadHookModel()
        let listener = Listener()
        let log = EventLog()
        model.onRead = { [unowned model] read in if read == 2 { model.safeUnobserve(\.watched, by: listener) } }
        let token = model.safeObserve(\.watched, by: listener, options: [.initial, .new]) { _, _, change in
            log.record(describe(change))
        }
        model.count = 1
        #expect(model.reads == 2)
        #expect(log.entries.isEmpty)
        #expect(!token.isActive)
        withExtendedLifetime(listener) {}
    }

    @Test func invalidatingAKeyValueObservationWhileItsInitialValueIsEvaluated_deliversNoInitial() {
        let model = ReadHookModel()
        let log = EventLog()
        model.onRead = { [unowned model] read in
            if read == 2 {
                for relation in SafeObservation.relations(of: model) { relation.invalidate() }
            }
        }
        let observation = model.observe(\.watched, options: [.initial, .new]) { _, change in
            log.record(describe(change))
        }
        model.count = 1
        #expect(model.reads == 2)
        #expect(log.entries.isEmpty)
        #expect(!observation.isActive)
    }

    @Test func unobservingWhileTheInitialValueIsEvaluated_onTheListenersActor_deliversNoInitial() async {
        let recorder = EvaluationRecorder()
        // Registered on the actor: `.initial` would be delivered synchronously.
        let (reads, isActive) = await recorder.observeUnobservingOnSecondRead()
        #expect(reads == 2)
        #expect(await recorder.entries.isEmpty)
        #expect(!isActive)
    }

    @Test func endingAStreamsRelationWhileTheInitialValueIsEvaluated_yieldsNothing() async {
        let model = ReadHookModel()
        model.onRead = { [unowned model] read in
            if read == 2 {
                for relation in SafeObservation.relations(of: model) { relation.invalidate() }
            }
        }
        var changes = model.changes(\.watched, options: [.initial, .new]).makeAsyncIterator()
        model.count = 1
        #expect(model.reads == 2)
        #expect(await changes.next().map(describe) == nil)
    }
}

/// An actor listener for ``EvaluationReentrancyTests``.
private actor EvaluationRecorder {
    var entries: [String] = []

    /// Observes a model's computed property from the actor itself; its second
    /// read (the `.initial` value) unobserves. Returns the reads made and
    /// whether the relation is still active.
    func observeUnobservingOnSecondRead() -> (reads: Int, isActive: Bool) {
        let model = ReadHookModel()
        model.onRead = { [unowned model] read in if read == 2 { model.safeUnobserve(\.watched, by: self) } }
        let token = model.safeObserve(\.watched, by: self, options: [.initial, .new]) { recorder, _, change in
            recorder.entries.append(describe(change))
        }
        model.count = 1
        return (model.reads, token.isActive)
    }
}

/// What breaks the chain of one relation's deliveries (`"prior OLD"` and
/// `"OLD->NEW"` entries): the first old value is `initial`, each old value
/// is the previous new value, the last new value is `current`, and with
/// `withPrior` each change comes right after a prior of the same old value.
func chainProblems(_ log: [String], from initial: Int, to current: Int, withPrior: Bool) -> [String] {
    var problems: [String] = []
    var value = initial
    var pendingPrior: Int?
    for entry in log {
        if entry.hasPrefix("prior ") {
            let old = Int(entry.dropFirst(6))!
            if pendingPrior != nil { problems.append("two priors in a row at \(entry)") }
            if old != value { problems.append("\(entry) after value \(value)") }
            pendingPrior = old
            continue
        }
        let parts = entry.split(separator: ">")
        let old = Int(parts[0].dropLast())!
        let new = Int(parts[1])!
        if old != value { problems.append("\(entry) after value \(value)") }
        if withPrior, pendingPrior != old { problems.append("\(entry) without its prior") }
        pendingPrior = nil
        value = new
    }
    if value != current { problems.append("ends at \(value), not \(current)") }
    if pendingPrior != nil { problems.append("a prior without its change") }
    return problems
}
