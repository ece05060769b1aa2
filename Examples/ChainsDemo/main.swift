// ChainsDemo — observing a chain, an optional chain and a computed property.
//
//   swift run ChainsDemo

import SafeObserve

final class Account: SafeObservable {
    @Observed var balance: Int
    init(balance: Int) { self.balance = balance }
}

final class Person: SafeObservable {
    @Observed var first = "Ada"
    @Observed var last = "Lovelace"
    @Observed var account = Account(balance: 10)
    @Observed var child: Person?

    /// Computed: no dependency declarations needed.
    var fullName: String { first + " " + last }
}

/// Prints what it receives; its relations end with it.
final class Console: SafeObserver {
    let observerLifetime = ObserverLifetime()
    func show(_ line: String) { print("  " + line) }
}

let person = Person()
let console = Console()

print("1. A chain follows the object graph: \\.account.balance")
person.safeObserve(\.account.balance, by: console, options: [.old, .new]) { console, _, change in
    console.show("balance \(change.oldValue!) → \(change.newValue!)")
}
person.account.balance = 20  // the leaf changes
let previous = person.account
person.account = Account(balance: 100)  // a link is replaced: re-targeted
previous.balance = 999  // the old account is no longer watched: nothing printed
person.account.balance = 101

print("2. An optional chain: \\.child?.account.balance")
person.safeObserve(\.child?.account.balance, by: console) { console, _, change in
    console.show("child's balance: " + (change.newValue!.map(String.init) ?? "no child"))
}
let child = Person()
person.child = child
child.account.balance = 5
person.child = nil

print("3. A computed property: \\.fullName")
person.safeObserve(\.fullName, by: console) { console, _, change in
    console.show("full name: \(change.newValue!)")
}
person.first = "Augusta"
person.last = "King"

print("4. Unobserving a chain is like unobserving a property")
person.safeUnobserve(\.account.balance, by: console)
person.account.balance = 0  // nothing printed
print("  relations left on person: \(SafeObservation.relations(of: person).count)")
