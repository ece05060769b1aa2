import SafeObserve
import Testing

// The overview of the catalog (SafeObserve.md).
enum CatalogOverview {
    // example: SafeObserve.md 1
    final class Counter: SafeObservable {
        @Observed var count = 0
    }

    @Test("SafeObserve.md: the overview")
    static func overview() {
        let counter = Counter()
        let label = Label()
        counter.safeObserve(\.count, by: label, options: [.initial, .new]) { label, counter, change in
            label.text = "\(change.newValue!)"
        }
        // end example
        counter.count = 4
        #expect(label.history == ["0", "4"])
    }
}

// GettingStarted.md.
enum GettingStarted {
    // example: GettingStarted.md 1
    final class Player: SafeObservable {
        @Observed var score = 0
        @Observed var name = "Player 1"
    }
    // end example

    // example: GettingStarted.md 2
    final class Scoreboard {
        var text = ""
    }

    @Test("GettingStarted.md: observe")
    static func observe() {
        let player = Player()
        let board = Scoreboard()
        player.safeObserve(\.score, by: board, options: [.initial, .old, .new]) { board, player, change in
            board.text = "\(player.name): \(change.newValue!)"
        }
        player.score += 10  // board.text == "Player 1: 10"
        // end example
        #expect(board.text == "Player 1: 10")

        // example: GettingStarted.md 4
        player.safeUnobserve(\.score, by: board)  // idempotent
        // end example
        player.score += 1
        #expect(board.text == "Player 1: 10")
        player.safeUnobserve(\.score, by: board)
    }

    final class Counter: SafeObservable {
        @Observed var count = 0
    }

    @Test("GettingStarted.md: changes made inside a handler")
    static func changesMadeInsideAHandler() {
        let counter = Counter()
        let clamp = Label()
        let label = Label()
        // example: GettingStarted.md 3
        counter.safeObserve(\.count, by: clamp) { _, counter, change in
            if change.newValue! < 3 { counter.count += 1 }  // 1 → 2 → 3
        }
        counter.safeObserve(\.count, by: label, options: [.old, .new]) { label, _, change in
            label.text = "\(change.oldValue!) → \(change.newValue!)"
        }
        counter.count = 1
        // clamp was told 0 → 1, 1 → 2, 2 → 3; so was label, in that order, once
        // the change to 3 reached it.
        // (KVO tells label 2 → 3, then 1 → 2, then 0 → 1, leaving it showing 1.)
        // end example
        #expect(counter.count == 3)
        #expect(label.history == ["0 → 1", "1 → 2", "2 → 3"])
    }

    @Test("GettingStarted.md: when player dies the relation ends; when board dies, by the next change")
    static func stopObservingOrDont() {
        let board = Scoreboard()
        var token: ObservationToken?
        #expect(
            isReleased(
                making: { Player() },
                afterUsing: { player in
                    token = player.safeObserve(\.score, by: board) { board, _, _ in board.text = "x" }
                }))
        #expect(token?.isActive == false)

        let player = Player()
        do {
            let doomed = Scoreboard()
            token = player.safeObserve(\.score, by: doomed) { board, _, _ in board.text = "x" }
        }
        player.score += 1
        #expect(token?.isActive == false)
        #expect(SafeObservation.relations(of: player).isEmpty)
    }
}
