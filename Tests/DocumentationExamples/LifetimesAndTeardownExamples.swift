import SafeObserve
import Testing

enum LifetimesAndTeardown {
    final class Counter: SafeObservable {
        @Observed var count = 0
        var history: [Int] = []
    }

    @Test("LifetimesAndTeardown.md: an object may observe itself, with no retain cycle")
    static func selfObservation() {
        var history: [Int] = []
        #expect(
            isReleased(
                making: { Counter() },
                afterUsing: { counter in
                    // example: LifetimesAndTeardown.md 1
                    counter.safeObserve(\.count, by: counter) { counter, _, change in
                        counter.history.append(change.newValue!)
                    }
                    // end example
                    counter.count = 1
                    counter.count = 2
                    history = counter.history
                }))
        #expect(history == [1, 2])
    }
}

enum PicturingRelations {
    final class Inbox: SafeObservable {
        @Observed var unread = 0
    }

    final class Badge {}
    final class Logger {}

    @Test("PicturingRelations.md: graph(of:) describes the relations of the objects given")
    static func graph() {
        let inbox = Inbox()
        let badge = Badge()
        let logger = Logger()
        inbox.safeObserve(\.unread, by: badge) { _, _, _ in }
        inbox.safeObserve(\.unread, by: logger, options: [.old, .new]) { _, _, _ in }
        // example: PicturingRelations.md 1
        print(SafeObservation.graph(of: [inbox, badge, logger]))
        // end example
        let graph = SafeObservation.graph(of: [inbox, badge, logger])
        #expect(graph.hasPrefix("digraph"))
        #expect(graph.contains("Badge") && graph.contains("Logger") && graph.contains("Inbox"))
    }
}
