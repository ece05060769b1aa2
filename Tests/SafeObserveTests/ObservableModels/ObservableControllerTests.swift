// `ObservationController` on `@Observable` models (issue 32): the
// controller's promises (dedupe, retained models, the observer's and the
// controller's lifetimes, several key paths) hold with the models' timing.

import Observation
import Synchronization
import Testing

@testable import SafeObserve

@Observable
private final class Inbox {
    var unread = 0
    var title = "Inbox"
    @ObservationIgnored let lifetime: LifetimeCounter?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }
    deinit { lifetime?.didDeinit() }
}

@MainActor
private final class Badge {
    var shown: [Int] = []
    var refreshes = 0
    var changes: [String] = []

    func refresh() { refreshes += 1 }
    func show(_ change: ObservedChange<Int>) { shown.append(change.newValue!) }
    func show(_ change: ObservedChange<Int>, of inbox: Inbox) { shown.append(change.newValue! * 10) }
}

/// An observer that takes every change through the delegate method, and
/// several key paths through actions.
@MainActor
private final class InboxWatcher: ObservationControllerDelegate {
    var told: [String] = []

    nonisolated func observationController<Object: AnyObject>(
        didObserve change: ObservedKeyPathChange<Object>, of object: Object
    ) {
        // Registered from the main actor: told there.
        let name = change.keyPath == \Inbox.unread ? "unread" : change.keyPath == \Inbox.title ? "title" : "?"
        let line = "delegate \(name) \(change.newValue.map { "\($0)" } ?? "nil")"
        MainActor.assumeIsolated { told.append(line) }
    }

    func reload() { told.append("reload") }
    func changed(_ change: ObservedKeyPathChange<Inbox>) {
        told.append("changed \(change.keyPath == \Inbox.unread ? "unread" : "title")")
    }
    func changed(_ change: ObservedKeyPathChange<Inbox>, of inbox: Inbox) {
        told.append("changed \(change.keyPath == \Inbox.unread ? "unread" : "title") of \(inbox.title)")
    }
}

@Suite("ObservationController on @Observable models")
@MainActor
struct ObservableControllerTests {
    /// `.initial` before the call returns, then each change after the
    /// mutating call returned, on the caller's actor; observing again keeps
    /// the first handler.
    @Test func aClosure_isToldTheInitialValue_thenEachChange_andObservingAgainKeepsTheFirst() async {
        let inbox = Inbox()
        let badge = Badge()
        let controller = ObservationController(observer: badge)
        controller.observe(inbox, keyPath: \.unread, options: [.initial, .new]) { badge, _, change in
            MainActor.assertIsolated()
            badge.shown.append(change.newValue!)
        }
        controller.observe(inbox, keyPath: \.unread) { badge, _, _ in badge.shown.append(-1) }
        #expect(badge.shown == [0])
        inbox.unread = 3
        #expect(badge.shown == [0], "delivered inside the mutating call")
        #expect(await eventually { badge.shown == [0, 3] })
        #expect(SafeObservation.relations(of: inbox).count == 1)
    }

    /// The three action forms call the observer's methods.
    @Test func actions_callTheObserversMethods() async {
        let inbox = Inbox()
        let badge = Badge()
        let controller = ObservationController(observer: badge)
        controller.observe(inbox, keyPath: \.unread, action: Badge.refresh)
        let other = Inbox()
        controller.observe(other, keyPath: \.unread, action: Badge.show as (Badge) -> (ObservedChange<Int>) -> Void)
        let third = Inbox()
        controller.observe(
            third, keyPath: \.unread, action: Badge.show as (Badge) -> (ObservedChange<Int>, Inbox) -> Void)
        inbox.unread = 1
        other.unread = 2
        third.unread = 3
        #expect(await eventually { badge.refreshes == 1 && badge.shown.sorted() == [2, 30] })
    }

    /// The delegate forms, one key path and several: each change reaches
    /// the delegate method after the mutating call returned, on the
    /// caller's actor, `.initial` first and in argument order.
    @Test func theDelegateForms_tellTheDelegateMethodEachChange() async {
        let inbox = Inbox()
        let other = Inbox()
        let watcher = InboxWatcher()
        let controller = ObservationController(observer: watcher)
        controller.observe(inbox, keyPath: \.unread, options: [.initial, .new])
        controller.observe(other, keyPaths: \.title, \.unread, options: [.initial, .new])
        #expect(watcher.told == ["delegate unread 0", "delegate title Inbox", "delegate unread 0"])
        inbox.unread = 4
        #expect(watcher.told.count == 3, "delivered inside the mutating call")
        #expect(await eventually { watcher.told.count == 4 })
        other.title = "Other"
        #expect(await eventually { watcher.told.count == 5 })
        #expect(watcher.told.suffix(2) == ["delegate unread 4", "delegate title Other"])
        #expect(SafeObservation.relations(of: other).count == 2)
    }

    /// The three action forms over several key paths: each change calls
    /// the observer's method, naming its key path (and the model).
    @Test func severalKeyPaths_theActionForms_callTheObserversMethods() async {
        let watcher = InboxWatcher()
        let controller = ObservationController(observer: watcher)
        let first = Inbox()
        let second = Inbox()
        let third = Inbox()
        third.title = "Third"
        controller.observe(first, keyPaths: \.unread, \.title, action: InboxWatcher.reload)
        controller.observe(
            second, keyPaths: \.unread, \.title,
            action: InboxWatcher.changed as (InboxWatcher) -> (ObservedKeyPathChange<Inbox>) -> Void)
        controller.observe(
            third, keyPaths: \.unread, \.title,
            action: InboxWatcher.changed as (InboxWatcher) -> (ObservedKeyPathChange<Inbox>, Inbox) -> Void)
        first.title = "First"
        #expect(await eventually { watcher.told == ["reload"] })
        second.unread = 1
        #expect(await eventually { watcher.told.count == 2 })
        third.unread = 2
        #expect(await eventually { watcher.told.count == 3 })
        #expect(watcher.told == ["reload", "changed unread", "changed unread of Third"])
        controller.unobserve(first)
        first.unread = 9
        second.title = "Second"
        #expect(await eventually { watcher.told.count == 4 })
        #expect(watcher.told.last == "changed title")
        #expect(SafeObservation.relations(of: first).isEmpty)
    }

    /// Several key paths, one handler: each change names its key path.
    @Test func severalKeyPaths_eachChangeNamesItsKeyPath() async {
        let inbox = Inbox()
        let badge = Badge()
        let controller = ObservationController(observer: badge)
        controller.observe(inbox, keyPaths: \.unread, \.title, options: [.initial, .new]) { badge, _, change in
            badge.changes.append(change.keyPath == \Inbox.unread ? "unread" : "title")
        }
        #expect(badge.changes == ["unread", "title"])
        inbox.title = "Mail"
        #expect(await eventually { badge.changes == ["unread", "title", "title"] })
    }

    /// The controller keeps the models it observes (`retainsObserved`)
    /// until they are unobserved, and unobserving ends their relations.
    @Test func retainedModels_liveUntilUnobserved() {
        let models = LifetimeCounter()
        let badge = Badge()
        let controller = ObservationController(observer: badge)
        var inbox: Inbox? = Inbox(lifetime: models)
        controller.observe(inbox!, keyPath: \.unread) { _, _, _ in }
        controller.observe(inbox!, keyPath: \.title) { _, _, _ in }
        weak let weakInbox = inbox
        inbox = nil
        #expect(models.liveCount == 1, "the controller did not retain its model")
        controller.unobserve(weakInbox!, keyPath: \.unread)
        #expect(models.liveCount == 1, "released while a key path is still observed")
        #expect(SafeObservation.relations(of: weakInbox!).count == 1)
        controller.unobserve(weakInbox!)
        #expect(models.liveCount == 0, "unobserving every key path kept the model")
    }

    /// Not retained, a model that dies ends its relations; the controller's
    /// death ends the rest, and neither side was kept alive.
    @Test func aModelThatDies_orAControllerThatDies_endsTheRelations() {
        let models = LifetimeCounter()
        let badge = Badge()
        var controller: ObservationController<Badge>? = ObservationController(observer: badge, retainsObserved: false)
        var inbox: Inbox? = Inbox(lifetime: models)
        controller!.observe(inbox!, keyPath: \.unread) { _, _, _ in }
        inbox = nil
        #expect(models.liveCount == 0)
        let kept = Inbox()
        controller!.observe(kept, keyPath: \.unread) { _, _, _ in }
        #expect(SafeObservation.relations(of: kept).count == 1)
        controller = nil
        #expect(SafeObservation.relations(of: kept).isEmpty, "the controller's death left its relation")
    }

    /// An observer that dies is never called again.
    @Test func anObserverThatDies_isNeverCalledAgain() async {
        let inbox = Inbox()
        let calls = Atomic<Int>(0)
        var badge: Badge? = Badge()
        let controller = ObservationController(observer: badge!)
        controller.observe(inbox, keyPath: \.unread) { _, _, _ in calls.add(1, ordering: .relaxed) }
        inbox.unread = 1
        badge = nil
        inbox.unread = 2
        try? await Task.sleep(for: .milliseconds(50))  // the waiting delivery runs meanwhile
        #expect(calls.load(ordering: .relaxed) == 0)
        withExtendedLifetime(controller) {}
    }
}
