// Each line marked `expected-error` must not compile, and every other line
// must: an `@Observable` model is observed only from the isolation that owns
// it (a non-`Sendable` model's region, a `@MainActor` model's actor),
// because its key path is read where the handler runs. Checked by
// .ci/compile-failures.
import Observation
import SafeObserve

@Observable final class Store { var count = 0 }

// @unchecked Sendable: never compiled into a program; it stands for a model
// whose state is behind a lock.
@Observable final class LockedStore: @unchecked Sendable { var count = 0 }

final class Listener {}

final class SendableListener: Sendable {}

actor Log {
    var counts: [Int] = []
    func append(_ count: Int) { counts.append(count) }
}

func fromNonisolatedCode(_ store: Store, _ locked: LockedStore) {
    store.safeObserve(\.count, by: Listener()) { _, _, _ in }  // expected-error
    store.safeObserve(\.count, by: SendableListener(), isolation: nil) { _, _, _ in }  // expected-error
    _ = store.changes(\.count)  // expected-error
    _ = store.values(\.count, isolation: nil)  // expected-error
    locked.safeObserve(\.count, by: Listener(), isolation: nil) { _, _, _ in }  // expected-error
    locked.safeObserve(\.count, by: SendableListener(), isolation: nil) { _, _, _ in }
    _ = locked.values(\.count, isolation: nil)
}

func fromAsyncNonisolatedCode(_ store: Store) async {
    store.safeObserve(\.count, by: Listener()) { _, _, _ in }  // expected-error
}

@MainActor func fromTheMainActor(_ store: Store, _ log: Log) {
    store.safeObserve(\.count, by: Listener()) { _, _, _ in }
    _ = store.values(\.count)
    store.safeObserve(\.count, by: log) { log, _, change in log.append(change.newValue!) }  // expected-error
}

extension Log {
    func fromTheListener(_ store: Store) {
        store.safeObserve(\.count, by: Listener()) { _, _, _ in }
        _ = store.changes(\.count)
    }
}

final class Badge {
    lazy var observationController = ObservationController(observer: self)
    func fromNonisolatedCode(_ store: Store) {
        observationController.observe(store, keyPath: \.count) { _, _, _ in }  // expected-error
    }
    @MainActor func fromTheMainActor(_ store: Store) {
        observationController.observe(store, keyPath: \.count) { _, _, _ in }
    }
}

// A `@MainActor` model is `Sendable`, but its properties belong to the main
// actor: their key paths are not `Sendable`, so only the main actor reads them.
@MainActor @Observable final class ViewModel { var items: [String] = [] }

actor Counter {
    var total = 0
    func add(_ count: Int) { total += count }
}

@MainActor func aMainActorModel(_ model: ViewModel, _ counter: Counter) {
    model.safeObserve(\.items, by: Listener()) { _, _, _ in }
    _ = model.values(\.items)
    model.safeObserve(\.items, by: SendableListener(), isolation: nil) { _, _, _ in }  // expected-error
    _ = model.values(\.items, isolation: nil)  // expected-error
    _ = model.changes(\.items, isolation: nil)  // expected-error
    model.safeObserve(\.items, by: counter) { counter, _, _ in counter.add(1) }  // expected-error
}

nonisolated func observe<Value>(_ model: ViewModel, _ keyPath: KeyPath<ViewModel, Value>) {
    model.safeObserve(keyPath, by: SendableListener(), isolation: nil) { _, _, _ in }  // expected-error
}
