import SafeObserve
import Testing

enum Threading {
    /// The model background actors change: shared between actors, so
    /// `Sendable`, as the article says.
    final class Inbox: SafeObservable, @unchecked Sendable {
        // @unchecked Sendable: one actor writes `unread` at a time (the test's `Background`).
        @Observed var unread = 0
    }

    actor Background {
        func bump(_ inbox: Inbox) {
            inbox.unread += 1
        }
    }

    // example: Threading.md 1
    @MainActor
    final class BadgeModel {
        var text = ""

        func show(_ inbox: Inbox) {
            inbox.safeObserve(\.unread, by: self, options: [.initial, .new]) { model, _, change in
                model.text = "\(change.newValue!)"  // main-actor state, on the main actor
            }
        }
    }
    // end example

    @Test("Threading.md: a main-actor view model fed by a background actor")
    @MainActor
    static func mainActorViewModel() async {
        let inbox = Inbox()
        let model = BadgeModel()
        model.show(inbox)
        #expect(model.text == "0")
        let bg = Background()
        await bg.bump(inbox)
        await bg.bump(inbox)
        #expect(await eventually { model.text == "2" })
    }

    final class Counter: SafeObservable {
        @Observed var count = 0
    }

    @MainActor
    static func show(_ counter: Counter, on label: Label) async {
        // example: Threading.md 2
        for await count in counter.values(\.count) {  // the current value, then each new one
            label.text = "\(count)"
        }
        // end example
    }

    @Test("Threading.md: awaiting changes")
    @MainActor
    static func awaitingChanges() async {
        let counter = Counter()
        let label = Label()
        let loop = Task { await show(counter, on: label) }
        #expect(await eventually { label.text == "0" })
        counter.count = 5
        #expect(await eventually { label.text == "5" })
        // "cancelling the consuming task ... ends the relation"
        loop.cancel()
        #expect(await finishes(loop))
        #expect(SafeObservation.relations(of: counter).isEmpty)
    }
}
