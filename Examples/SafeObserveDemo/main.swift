// SafeObserveDemo — the three ways Key-Value Observing crashes, run safely.
//
//   swift run SafeObserveDemo

import SafeObserve

final class Counter: SafeObservable {
    @Observed var count = 0
    let name: String
    init(name: String) { self.name = name }
    deinit { print("  \(name) deinitialized") }
}

final class Label {
    var text = ""
    let name: String
    init(name: String) { self.name = name }
    deinit { print("  \(name) deinitialized") }
}

/// A listener whose relations end inside its own deinit (one stored property).
final class Dashboard: SafeObserver {
    let observerLifetime = ObserverLifetime()
    deinit { print("  dashboard deinitialized (its relations ended with it)") }
}

print("1. The listener dies while it is still registered")
do {
    let counter = Counter(name: "counter")
    var label: Label? = Label(name: "label")
    counter.safeObserve(\.count, by: label!) { label, _, change in
        label.text = "count = \(change.newValue!)"
        print("  label shows \"\(label.text)\"")
    }
    counter.count = 1
    label = nil
    counter.count = 2  // KVO: message to a dangling pointer. SafeObserve: nobody to call.
    let left = SafeObservation.relations(of: counter).count
    print("  after the label died, the change went nowhere; relations left: \(left)")
}

print("2. The observed object dies while it is still observed")
do {
    let label = Label(name: "label")
    var counter: Counter? = Counter(name: "counter")
    counter!.safeObserve(\.count, by: label, options: [.initial, .new]) { label, _, change in
        label.text = "count = \(change.newValue!)"
    }
    counter = nil  // KVO: "deallocated while key value observers were still registered".
    print("  the label's relations: \(SafeObservation.relations(observedBy: label).count)")
}

print("3. More removals than additions")
do {
    let counter = Counter(name: "counter")
    let label = Label(name: "label")
    let token = counter.safeObserve(\.count, by: label) { _, _, _ in }
    counter.safeUnobserve(\.count, by: label)
    counter.safeUnobserve(\.count, by: label)  // KVO: NSRangeException. SafeObserve: no-op.
    token.invalidate()
    counter.safeUnobserve(by: label)
    print("  four removals of one relation: fine; active = \(token.isActive)")
}

print("4. Bonus: an opt-in listener, options, and unobserving inside .initial")
do {
    let counter = Counter(name: "counter")
    var dashboard: Dashboard? = Dashboard()
    counter.safeObserve(\.count, by: dashboard!, options: [.initial, .old, .new, .prior]) { _, _, change in
        if change.isInitial {
            print("  initial value \(change.newValue!)")
        } else if change.isPrior {
            print("  will change from \(change.oldValue!)")
        } else {
            print("  changed \(change.oldValue!) → \(change.newValue!)")
        }
    }
    counter.safeObserve(\.count, by: counter, options: [.initial]) { counter, _, _ in
        counter.safeUnobserve(\.count, by: counter)  // self-observation, removed during .initial
    }
    counter.count = 41
    counter.count += 1
    dashboard = nil
    counter.count = 0
    print("  relations left on the counter: \(SafeObservation.relations(of: counter).count)")
}
print("Done: no crash, no leak.")
