// `values(_:)` and `changes(_:options:)` on `@Observable` models (issue 32):
// what the documentation of `Observable.changes(_:options:buffering:)`
// promises, checked as a consumer uses the sequences.

import Observation
import Synchronization
import Testing

@testable import SafeObserve

@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class SStore: @unchecked Sendable {
    var count = 0
    var account = SAccount()
    @ObservationIgnored let lifetime: LifetimeCounter?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }
    deinit { lifetime?.didDeinit() }
}

@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class SAccount: @unchecked Sendable {
    var balance = 0
}

/// A view model of the common app shape, which counts the reads of `probe`
/// made off the main actor (each one a data race with its writes). Asked
/// of the runtime: under the test runner, the main actor's jobs need not
/// run on the process's main thread.
@MainActor @Observable
private final class MainActorViewModel {
    var count = 0
    @ObservationIgnored nonisolated let offMainReads = Atomic<Int>(0)
    var probe: Int {
        if !_isCurrentExecutor(MainActor.sharedUnownedExecutor, isMainActor: true) {
            offMainReads.add(1, ordering: .relaxed)
        }
        return count
    }
}

/// What a consuming task collected, readable from the test.
private final class Collected<Element: Sendable>: Sendable {
    private let state = _Mutex<(elements: [Element], finished: Bool)>(([], false))
    func append(_ element: Element) { state.withLock { $0.elements.append(element) } }
    func finish() { state.withLock { $0.finished = true } }
    var elements: [Element] { state.withLock { $0.elements } }
    var isFinished: Bool { state.withLock { $0.finished } }
}

@Suite("Observing @Observable models as asynchronous sequences")
struct ObservableModelSequenceTests {
    /// `values` yields the current value first, then what changes: writes
    /// from other threads are never lost, and the last value is the model's.
    @Test func values_yieldTheCurrentValue_thenEveryChangeUpToTheModelsValue() async {
        let store = SStore()
        store.count = 7
        let collected = Collected<Int>()
        let consumer = Task {
            for await value in store.values(\.count, buffering: .unbounded, isolation: nil) {
                collected.append(value)
                if value == 500 { break }
            }
        }
        #expect(await eventually { collected.elements.first == 7 }, "no initial value")
        stressRunConcurrently([{ for n in 8...500 { store.count = n } }])
        await consumer.value
        let values = collected.elements
        #expect(values.first == 7)
        #expect(values.last == 500, "the last change was lost: \(values.suffix(3))")
        #expect(zip(values, values.dropFirst()).allSatisfy { $0 < $1 }, "values out of order")
    }

    /// `changes` chain: each `oldValue` is the previous `newValue`, from the
    /// value read at registration.
    @Test func changes_chain_fromTheValueAtRegistration() async {
        let store = SStore()
        let collected = Collected<ObservedChange<Int>>()
        var iterator = store.changes(\.count, options: [.old, .new], isolation: nil).makeAsyncIterator()
        stressRunConcurrently([{ for n in 1...300 { store.count = n } }])
        while let change = await iterator.next(isolation: #isolation) {
            collected.append(change)
            if change.newValue == 300 { break }
        }
        var expected = 0
        for change in collected.elements {
            #expect(change.oldValue == expected, "not chained: \(collected.elements)")
            expected = change.newValue ?? -1
        }
        #expect(expected == 300)
    }

    /// A chain (`\.account.balance`) follows a replaced link.
    @Test func aChain_followsAReplacedLink() async {
        let store = SStore()
        var iterator = store.values(\.account.balance, buffering: .unbounded, isolation: nil).makeAsyncIterator()
        #expect(await iterator.next(isolation: #isolation) == 0)
        let next = SAccount()
        next.balance = 5
        store.account = next
        #expect(await iterator.next(isolation: #isolation) == 5)
        next.balance = 6
        #expect(await iterator.next(isolation: #isolation) == 6)
    }

    /// The sequence never keeps the model alive, and finishes when the
    /// model dies, with no further activity.
    @Test func aModelThatDies_finishesItsSequence_andWasNeverKeptAlive() async {
        let models = LifetimeCounter()
        var store: SStore? = SStore(lifetime: models)
        let collected = Collected<Int>()
        let sequence = store!.values(\.count, isolation: nil)
        let consumer = Task {
            for await value in sequence { collected.append(value) }
            collected.finish()
        }
        #expect(await eventually { collected.elements == [0] })
        store = nil
        #expect(models.liveCount == 0, "the sequence kept the model alive")
        #expect(await eventually { collected.isFinished }, "the sequence outlived its model")
        await consumer.value
    }

    /// Cancelling the consuming task ends the relation.
    @Test func cancellingTheConsumer_endsTheRelation() async {
        let store = SStore()
        let started = Collected<Int>()
        let consumer = Task {
            for await value in store.values(\.count, isolation: nil) { started.append(value) }
            started.finish()
        }
        #expect(await eventually { !started.elements.isEmpty })
        #expect(SafeObservation.relations(of: store).count == 1)
        consumer.cancel()
        await consumer.value
        #expect(started.isFinished)
        #expect(await eventually { SafeObservation.relations(of: store).isEmpty }, "the relation outlived its consumer")
    }

    /// An iterator dropped without being cancelled ends its relation.
    @Test func aDroppedIterator_endsItsRelation() async {
        let store = SStore()
        do {
            var iterator = store.changes(\.count, options: [.initial, .new], isolation: nil).makeAsyncIterator()
            #expect(await iterator.next(isolation: #isolation)?.newValue == 0)
            #expect(SafeObservation.relations(of: store).count == 1)
        }
        #expect(SafeObservation.relations(of: store).isEmpty, "a dropped iterator left its relation")
    }

    /// The common app case compiles and runs as written: a main-actor
    /// consumer, no `assumeIsolated`.
    @MainActor
    @Test func aMainActorConsumer_readsTheValues() async {
        let store = SStore()
        var seen: [Int] = []
        for await value in store.values(\.count, buffering: .unbounded) {
            seen.append(value)
            if value == 0 { store.count = 1 }
            if value == 1 { break }
        }
        #expect(seen == [0, 1])
    }

    /// A `@MainActor` model's key path is read on the main actor, where
    /// `values` was called, not on a global executor (attack round 9, F3:
    /// it was, a data race with the main actor's writes, 290 to 435 times
    /// in 2,000 changes).
    @MainActor
    @Test func aMainActorModelsKeyPath_isReadOnTheMainActor() async {
        let model = MainActorViewModel()
        let last = Atomic<Int>(-1)
        let consumer = Task {
            for await value in model.values(\.probe, buffering: .unbounded) {
                last.store(value, ordering: .relaxed)
                if value == 200 { break }
            }
        }
        #expect(await eventually { last.load(ordering: .relaxed) == 0 }, "no .initial")
        for value in 1...200 {
            model.count = value
            if value % 10 == 0 { await Task.yield() }
        }
        #expect(await eventually { last.load(ordering: .relaxed) == 200 })
        consumer.cancel()
        #expect(model.offMainReads.load(ordering: .relaxed) == 0, "read off the main actor")
    }

    /// `.prior` is reported, names the model's type, and the sequence is
    /// empty: no crash.
    @Test func prior_isReported_andTheSequenceIsEmpty() async {
        let messages = EventLog()
        let store = SStore()
        var iterator = _Diagnostics.withHandler {
            messages.record($0)
        } body: {
            store.changes(\.count, options: [.prior, .new], isolation: nil).makeAsyncIterator()
        }
        #expect(await iterator.next(isolation: #isolation) == nil)
        #expect(messages.entries.count == 1)
        #expect(messages.entries.first?.contains("SStore") == true, "\(messages.entries)")
    }
}
