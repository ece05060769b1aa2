import Foundation
import SafeObserve
import SafeObserveFoundation
import Testing

// Doc-comment examples, compiled and run where practical (not checked by
// `.ci/doc-examples`, which reads README.md and the DocC articles): the
// iterators of `changes`, `values` and `notifications(named:)`, whose
// `next()` compiles only from nonisolated code, and the Foundation bridge's.
enum DocCommentExamples {
    final class Counter: SafeObservable {
        @Observed var count = 0
    }

    // ObservedChanges.AsyncIterator.next()
    nonisolated static func next(of iterator: inout ObservedChanges<Counter, Int>.AsyncIterator) async
        -> ObservedChange<Int>?
    {
        await iterator.next()
    }

    // ObservedValues.AsyncIterator.next()
    nonisolated static func next(of iterator: inout ObservedValues<Counter, Int>.AsyncIterator) async -> Int? {
        await iterator.next()
    }

    // PostedNotifications.AsyncIterator.next()
    nonisolated static func next(of iterator: inout PostedNotifications<Int>.AsyncIterator) async
        -> PostedNotification<Int>?
    {
        await iterator.next()
    }

    @Test("doc comments: the iterators' next(isolation:), from the main actor")
    @MainActor
    static func iteratorsOnTheMainActor() async {
        let counter = Counter()
        var changes = counter.changes(\.count).makeAsyncIterator()
        counter.count = 1
        let first = await changes.next(isolation: #isolation)
        #expect(first?.newValue == 1)

        var values = counter.values(\.count).makeAsyncIterator()
        let current = await values.next(isolation: #isolation)
        #expect(current == 1)

        let hub = NotificationHub()
        var iterator = hub.notifications(named: .unreadCountChanged).makeAsyncIterator()
        hub.post(.unreadCountChanged, payload: 4)
        let next = await iterator.next(isolation: #isolation)
        #expect(next?.payload == 4)
    }

    @Test("doc comments: the iterators' next(), from nonisolated code")
    static func iteratorsOffAnyActor() async {
        let counter = Counter()
        var changes = counter.changes(\.count).makeAsyncIterator()
        counter.count = 2
        #expect(await next(of: &changes)?.newValue == 2)
        var values = counter.values(\.count).makeAsyncIterator()
        #expect(await next(of: &values) == 2)
        let hub = NotificationHub()
        var notifications = hub.notifications(named: .unreadCountChanged).makeAsyncIterator()
        hub.post(.unreadCountChanged, payload: 5)
        #expect(await next(of: &notifications)?.payload == 5)
    }

    final class Clock {
        var refreshes = 0
        func refresh() { refreshes += 1 }
    }

    @Test("doc comments: the Foundation bridge's safeObserve and safeUnobserve")
    static func foundationBridge() {
        let center = NotificationCenter()
        let clock = Clock()
        center.safeObserve(.NSSystemTimeZoneDidChange, by: clock) { clock, _ in
            clock.refresh()
        }
        center.post(name: .NSSystemTimeZoneDidChange, object: nil)
        #expect(clock.refreshes == 1)
        center.safeUnobserve(.NSSystemTimeZoneDidChange, by: clock)
        center.post(name: .NSSystemTimeZoneDidChange, object: nil)
        #expect(clock.refreshes == 1)
        center.safeObserve(.NSSystemTimeZoneDidChange, by: clock) { clock, _ in clock.refresh() }
        center.safeUnobserve(by: clock)
        center.post(name: .NSSystemTimeZoneDidChange, object: nil)
        #expect(clock.refreshes == 1)
    }
}
