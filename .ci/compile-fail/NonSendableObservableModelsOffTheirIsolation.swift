// Each line marked `expected-error` must not compile, and every other line
// must: a non-`Sendable` `@Observable` model is observed only from the
// isolation that owns it, because its key path is read where the handler
// runs. Checked by .ci/compile-failures.
import Observation
import SafeObserve

@Observable final class Store { var count = 0 }

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
