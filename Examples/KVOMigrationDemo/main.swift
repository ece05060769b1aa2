// KVOMigrationDemo — Swift KVO code and its migrated form, side by side.
//
//   swift run KVOMigrationDemo
//
// Each section shows the KVO original in a comment (Foundation's KVO needs
// the Objective-C runtime, so it does not run on Linux) and runs the
// migrated code: `NSObject` became `SafeObservable`, `@objc dynamic` became
// `@Observed`, `NSKeyValueObservation` became `KeyValueObservation`, and
// nothing else changed.

import SafeObserve

// KVO:
//   final class Account: NSObject {
//       @objc dynamic var balance = 0
//   }
//   final class Person: NSObject {
//       @objc dynamic var name = "Ada"
//       @objc dynamic var account = Account()
//   }
final class Account: SafeObservable {
    @Observed var balance = 0
}

final class Person: SafeObservable {
    @Observed var name = "Ada"
    @Observed var account = Account()
}

/// A view that keeps its observations in properties, as KVO code does.
final class ProfileView {
    var nameObservation: KeyValueObservation?
    var balanceObservation: KeyValueObservation?

    func show(_ person: Person) {
        // KVO (identical):
        //   nameObservation = person.observe(\.name, options: [.initial, .new]) { person, change in
        //       print("name: \(change.newValue!)")
        //   }
        nameObservation = person.observe(\.name, options: [.initial, .new]) { _, change in
            print("name: \(change.newValue!)")
        }
        // A dotted key path: replacing `account` or changing its balance
        // both deliver. KVO (identical):
        //   balanceObservation = person.observe(\.account.balance, options: [.old, .new]) { _, change in … }
        balanceObservation = person.observe(\.account.balance, options: [.old, .new]) { _, change in
            print("balance: \(change.oldValue!) -> \(change.newValue!)")
        }
    }

    func stop() {
        // KVO (identical): releasing an observation ends it.
        nameObservation = nil
        balanceObservation?.invalidate()  // or invalidate(); idempotent
        balanceObservation?.invalidate()
    }
}

print("1. Observing, with the same calls as KVO")
var person: Person? = Person()
let view = ProfileView()
view.show(person!)  // name: Ada
person!.name = "Grace"  // name: Grace
person!.account.balance = 10  // balance: 0 -> 10
person!.account = Account()  // balance: 10 -> 0

print("2. Each observe call is an observation of its own, as in KVO")
var second: KeyValueObservation? = person!.observe(\.name, options: [.new]) { _, change in
    print("second observer: \(change.newValue!)")
}
person!.name = "Edsger"  // name: Edsger, second observer: Edsger
second = nil

print("3. Releasing the observation stops it")
view.stop()
person!.name = "Barbara"  // nothing

print("4. The object dying first is safe, and the observation just ends")
// KVO before iOS 11: "deallocated while key value observers were still
// registered" (a crash). Here the observation ends with its object.
let last = person!.observe(\.name, options: [.new]) { _, _ in }
person = nil
print("observation active after the person died: \(last.isActive)")  // false
last.invalidate()  // harmless

print("done")
