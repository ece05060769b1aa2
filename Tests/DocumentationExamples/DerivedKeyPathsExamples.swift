import SafeObserve
import Testing

enum DerivedKeyPaths {
    // example: DerivedKeyPaths.md 1
    final class Account: SafeObservable {
        @Observed var balance: Int

        init(balance: Int = 0) {
            self.balance = balance
        }
    }

    final class Person: SafeObservable {
        @Observed var first = "Ada"
        @Observed var last = "Lovelace"
        @Observed var account = Account()
        @Observed var child: Person?

        var fullName: String { first + " " + last }
    }

    @Test("DerivedKeyPaths.md: chains, optional chains and computed properties")
    static func overview() {
        let person = Person()
        let label = Label()
        person.safeObserve(\.account.balance, by: label, options: [.old, .new]) { label, _, change in
            label.text = "\(change.oldValue!) → \(change.newValue!)"
        }
        person.safeObserve(\.child?.account.balance, by: label) { label, _, change in
            label.text = change.newValue!.map(String.init) ?? "no child"
        }
        person.safeObserve(\.fullName, by: label) { label, _, change in
            label.text = change.newValue!
        }
        // end example

        // "`person.account = Account(balance: 50)` delivers `50`, with the
        // previous account's balance as the old value."
        let previous = person.account
        previous.balance = 7
        #expect(label.text == "0 → 7")
        person.account = Account(balance: 50)
        #expect(label.text == "7 → 50")
        // "From then on the previous account's changes are no longer
        // delivered; the new account's are."
        previous.balance = 8
        #expect(label.text == "7 → 50")
        person.account.balance = 51
        #expect(label.text == "50 → 51")
        // Optional chains deliver `nil` when a link becomes `nil`.
        person.child = Person()
        #expect(label.text == "0")
        person.child = nil
        #expect(label.text == "no child")
        // Computed properties deliver their recomputed value.
        person.first = "Grace"
        #expect(label.text == "Grace Lovelace")
    }

    struct Item: Equatable {
        var title: String
    }

    final class Inbox: SafeObservable {
        @Observed var items: [Item] = []

        // example: DerivedKeyPaths.md 2
        var third: Item? { items.indices.contains(2) ? items[2] : nil }
        // inbox.safeObserve(\.third, by: badge) { ... }
        // end example
    }

    @Test("DerivedKeyPaths.md: a computed property that checks the index never traps")
    static func thirdItem() {
        let inbox = Inbox()
        let badge = Label()
        inbox.safeObserve(\.third, by: badge) { badge, _, change in badge.text = change.newValue!?.title ?? "none" }
        inbox.items = [Item(title: "a"), Item(title: "b"), Item(title: "c")]
        #expect(badge.text == "c")
        inbox.items.removeLast(2)
        #expect(badge.text == "none")
    }
}
