import SafeObserve
import Testing

// example: README.md 1
enum QuickStart {
    final class Counter: SafeObservable {
        @Observed var count = 0
    }

    @Test("README: quick start")
    static func quickStart() {
        let label = Label()
        let counter = Counter()
        counter.safeObserve(\.count, by: label, options: [.initial, .old, .new]) { label, counter, change in
            label.text = "\(change.oldValue ?? 0) → \(change.newValue!)"
        }
        counter.count += 1  // the handler runs now, on this thread, after the store
        // Nothing to clean up. When `counter` dies, the relation ends in its deinit.
        // When `label` dies, the handler is never called again; the relation and what
        // the handler captured are released at the latest when the next change of
        // `count` reaches it (in `label`'s deinit if its class adopts `SafeObserver`).
        // end example
        #expect(label.history == ["0 → 0", "0 → 1"])
    }

    @Test("README: quick start — when counter dies, the relation ends in its deinit")
    static func objectDeath() {
        let label = Label()
        var tokens: [ObservationToken] = []
        #expect(
            isReleased(
                making: { Counter() },
                afterUsing: { counter in
                    tokens.append(counter.safeObserve(\.count, by: label) { label, _, _ in label.text = "x" })
                }))
        #expect(tokens.allSatisfy { !$0.isActive })
        #expect(SafeObservation.relations(observedBy: label).isEmpty)
    }

    @Test("README: quick start — a dead plain label’s relation ends at the latest when the next change reaches it")
    static func listenerDeath() {
        let counter = Counter()
        let captured = Captured()
        weak let weakCaptured = captured
        do {
            let label = Label()
            counter.safeObserve(\.count, by: label) { [captured] label, _, _ in label.text = captured.text }
        }
        _ = consume captured
        counter.count += 1  // the next change: the handler is not called, the relation ends
        #expect(SafeObservation.relations(of: counter).isEmpty)
        #expect(weakCaptured == nil, "what the handler captured is released")
    }

    final class Captured {
        let text = "captured"
    }
}

enum APIInOneScreen {
    final class Counter: SafeObservable {
        @Observed var count = 0
    }

    final class Account: SafeObservable {
        @Observed var balance = 0
    }

    final class Person: SafeObservable {
        @Observed var name = "Ada"
        @Observed var account = Account()
        @Observed var child: Person?
        var fullName: String { name + " Lovelace" }
    }

    @Test("README: the API in one screen")
    @MainActor
    static func apiInOneScreen() async {
        let object = Counter()
        let listener = Label()
        let person = Person()
        let counter = Counter()
        // example: README.md 2
        let token = object.safeObserve(\.count, by: listener, options: [.initial, .old, .new, .prior]) {
            listener, object, change in
            // change.newValue, change.oldValue, change.isPrior, change.isInitial
        }
        object.safeUnobserve(\.count, by: listener)  // idempotent
        object.safeUnobserve(by: listener)  // every key path of listener on object
        token.invalidate()  // idempotent; keeping the token is optional
        SafeObservation.removeAll(observedBy: listener)  // everything the listener observes, anywhere
        let onObject = SafeObservation.relations(of: object)  // introspection for debugging
        let ofListener = SafeObservation.relations(observedBy: listener)  // and leak tests

        person.safeObserve(\.account.balance, by: listener) { _, _, _ in }  // chains re-target when a link is replaced
        person.safeObserve(\.child?.name, by: listener) { _, _, _ in }  // optional chains deliver nil
        person.safeObserve(\.fullName, by: listener) { _, _, _ in }  // computed: whatever @Observed it reads

        // async: the current value, then each new one
        let values = Task { for await count in counter.values(\.count) { print(count) } }
        let changes = Task { for await change in counter.changes(\.count, options: [.old, .new]) { print(change) } }
        values.cancel()  // a loop ends when its task is cancelled or the object dies; so does its relation
        changes.cancel()
        // end example
        #expect(onObject.isEmpty)
        #expect(ofListener.isEmpty)
        #expect(SafeObservation.relations(observedBy: listener).count == 3)
        #expect(await finishes(values))
        #expect(await finishes(changes))
        #expect(await eventually { SafeObservation.relations(of: counter).isEmpty })
    }
}
