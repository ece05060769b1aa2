@testable import SafeObserve

/// An observer with a lazily created controller, methods for every action
/// arity, and the delegate fallback; it records what it receives.
class ControllerObserver: ObservationControllerDelegate, ObservationControllerOwner {
    let observationControllerStorage = ObservationControllerStorage()
    let lifetime: LifetimeCounter?
    let log = EventLog()
    /// Runs inside deinit.
    var onDeinit: ((ControllerObserver) -> Void)?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }

    deinit {
        onDeinit?(self)
        lifetime?.didDeinit()
    }

    func refresh() { log.record("refresh") }

    func countChanged(_ change: ObservedChange<Int>) { log.record("change \(describe(change))") }

    func countChanged(_ change: ObservedChange<Int>, of counter: Counter) {
        log.record("change \(describe(change)) of \(counter.title)")
    }

    func counterChanged(_ change: ObservedKeyPathChange<Counter>) { log.record("erased \(describe(change))") }

    func counterChanged(_ change: ObservedKeyPathChange<Counter>, of counter: Counter) {
        log.record("erased \(describe(change)) of \(counter.title)")
    }

    func observationController<Object: AnyObject>(didObserve change: ObservedKeyPathChange<Object>, of object: Object) {
        log.record("delegate \(describe(change))")
    }
}

/// A final owner, so `observationController` has one static type.
final class FinalControllerObserver: ControllerObserver {}

/// Formats a type-erased change: "count old->new flags".
func describe<Root>(_ change: ObservedKeyPathChange<Root>) -> String {
    let new = change.newValue.map { "\($0)" } ?? "nil"
    let old = change.oldValue.map { "\($0)" } ?? "nil"
    return "\(name(of: change.keyPath)) \(old)->\(new)" + (change.isPrior ? " prior" : "")
        + (change.isInitial ? " initial" : "")
}

/// The name of a `Counter` key path (key paths through property wrappers
/// print as `<computed …>`, so compare them instead).
func name(of keyPath: AnyKeyPath) -> String {
    switch keyPath {
    case \Counter.count: "count"
    case \Counter.title: "title"
    default: "\(keyPath)"
    }
}
