// ConsumerSmoke: SafeObserve used from another package, as users ship it.
//
// CI builds this program in debug and release, with `--static-swift-stdlib`,
// as a static executable (`-Xswiftc -static-executable`) and under the
// address sanitizer, and runs each build. It exits non-zero if any check fails.
//
//   cd Tests/ConsumerPackage && swift run -c release ConsumerSmoke

import Foundation
import Observation
import SafeObserve
import SafeObserveFoundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

// MARK: - Checks

nonisolated(unsafe) var failures: [String] = []  // nonisolated(unsafe): this program is single-threaded.
nonisolated(unsafe) var passed = 0  // nonisolated(unsafe): as above.

func check(_ condition: Bool, _ what: String) {
    if condition {
        passed += 1
    } else {
        failures.append(what)
        print("FAILED: \(what)")
    }
}

// @unchecked Sendable: this program is single-threaded.
final class Deaths: @unchecked Sendable {
    var count = 0
}

// MARK: - Fixtures

final class Counter: SafeObservable {
    @Observed var count = 0
    let deaths: Deaths?
    init(deaths: Deaths? = nil) { self.deaths = deaths }
    deinit { deaths?.count += 1 }
}

final class Label {
    var text = ""
    let deaths: Deaths?
    init(deaths: Deaths? = nil) { self.deaths = deaths }
    deinit { deaths?.count += 1 }
}

final class Dashboard: SafeObserver {
    let observerLifetime = ObserverLifetime()
    var seen = 0
}

/// Captured by handlers: released exactly when the relation ends.
final class Capture: Sendable {
    let deaths: Deaths
    init(_ deaths: Deaths) { self.deaths = deaths }
    deinit { deaths.count += 1 }
}

/// Statically initialized in optimized builds (a data-segment object).
// @unchecked Sendable: this program is single-threaded.
final class Settings: SafeObservable, @unchecked Sendable {
    static let shared = Settings()
    @Observed var volume = 1
}

let globalSettings = Settings()

final class Owner {}

final class HoldsDeadUnowned: SafeObservable {
    @Observed var count = 0
    unowned var owner: Owner
    init(owner: Owner) { self.owner = owner }
}

final class Reflecting: SafeObservable, CustomReflectable {
    @Observed var count = 0
    var mirrorCalls = 0
    var customMirror: Mirror {
        mirrorCalls += 1
        return Mirror(self, children: [])
    }
}

// MARK: - The three ways KVO crashes

do {
    // 1. The listener dies while registered.
    let counter = Counter()
    var label: Label? = Label()
    counter.safeObserve(\.count, by: label!) { label, _, change in label.text = "\(change.newValue!)" }
    counter.count = 1
    check(label?.text == "1", "a change reaches a live listener")
    label = nil
    counter.count = 2
    check(SafeObservation.relations(of: counter).isEmpty, "a dead listener's relation ends at the next change")
}
do {
    // 2. The observed object dies while observed.
    let label = Label()
    var counter: Counter? = Counter()
    counter!.safeObserve(\.count, by: label, options: [.initial, .new]) { label, _, change in
        label.text = "\(change.newValue!)"
    }
    counter = nil
    check(SafeObservation.relations(observedBy: label).isEmpty, "an object's death ends its relations")
}
do {
    // 3. More removals than additions.
    let counter = Counter()
    let label = Label()
    let token = counter.safeObserve(\.count, by: label) { _, _, _ in }
    counter.safeUnobserve(\.count, by: label)
    counter.safeUnobserve(\.count, by: label)
    token.invalidate()
    counter.safeUnobserve(by: label)
    check(!token.isActive, "removal is idempotent")
}

// MARK: - Lifetimes, both directions

do {
    let deaths = Deaths()
    weak var weakCounter: Counter?
    weak var weakLabel: Label?
    do {
        let counter = Counter(deaths: deaths)
        let label = Label(deaths: deaths)
        weakCounter = counter
        weakLabel = label
        let capture = Capture(deaths)
        counter.safeObserve(\.count, by: label) { _, _, _ in _ = capture }
        counter.safeObserve(\.count, by: counter) { _, _, _ in _ = capture }  // self-observation
        counter.count += 1
    }
    check(weakCounter == nil && weakLabel == nil, "nothing keeps either side alive")
    check(deaths.count == 3, "both sides and the handlers' capture are released (\(deaths.count) of 3)")
}
do {
    let deaths = Deaths()
    let counter = Counter()
    var dashboard: Dashboard? = Dashboard()
    let capture = Capture(deaths)
    counter.safeObserve(\.count, by: dashboard!) { dashboard, _, _ in
        dashboard.seen += 1
        _ = capture
    }
    _ = consume capture
    counter.count = 1
    check(dashboard?.seen == 1, "an opt-in listener receives changes")
    dashboard = nil
    check(deaths.count == 1, "an opt-in listener's death releases its handlers at once")
    check(SafeObservation.relations(of: counter).isEmpty, "an opt-in listener's death ends its relations")
}

// MARK: - Objects and values users have

do {
    // Statically allocated singletons (global `let`, `static let`): observed
    // twice each, so the second registration takes the cached path.
    for settings in [globalSettings, Settings.shared] {
        let label = Label()
        let token = settings.safeObserve(\.volume, by: label) { label, _, change in label.text = "\(change.newValue!)" }
        let second = settings.safeObserve(\.volume, by: Label()) { _, _, _ in }
        settings.volume += 1
        check(label.text == "\(settings.volume)", "a singleton's change is delivered")
        token.invalidate()
        second.invalidate()
    }
}
do {
    // A dead `unowned` field SafeObserve must never read, twice (cached path).
    for _ in 0..<2 {
        let object = HoldsDeadUnowned(owner: Owner())
        let label = Label()
        let token = object.safeObserve(\.count, by: label) { label, _, _ in label.text = "seen" }
        object.count = 1
        check(label.text == "seen", "an object with a dead unowned field is observed")
        check(SafeObservation.relations(of: object) == [token], "introspection skips fields it does not own")
    }
}
do {
    // A custom mirror is user code SafeObserve never runs.
    let object = Reflecting()
    let label = Label()
    let token = object.safeObserve(\.count, by: label) { _, _, _ in }
    check(SafeObservation.relations(of: object) == [token], "a CustomReflectable object's relations are listed")
    check(object.mirrorCalls == 0, "no custom mirror runs")
}
do {
    // Every bit of the public options value, then the object's death.
    let label = Label()
    var counter: Counter? = Counter()
    let token = counter!.safeObserve(\.count, by: label, options: ObservationOptions(rawValue: 0xFB)) { label, _, c in
        label.text += c.isPrior ? "p" : "c"
    }
    counter!.count = 1
    check(label.text == "pc", "unknown option bits are ignored")
    counter = nil
    check(!token.isActive, "the object's death ends a relation with unknown option bits")
}

// MARK: - Chains and KVO's shape

final class Leaf: SafeObservable {
    @Observed var value = 0
}

final class Middle: SafeObservable {
    @Observed var leaf = Leaf()
}

final class Root: SafeObservable {
    @Observed var middle = Middle()
}

final class TitledLeaf: SafeObservable {
    @Observed var title = "untitled"
}

final class TitledMiddle: SafeObservable {
    @Observed var leaf = TitledLeaf()
}

final class TitledRoot: SafeObservable {
    @Observed var middle = TitledMiddle()
}

/// A chain rooted at a singleton (statically initialized where the compiler
/// can): its links are read from storage when one is replaced.
// @unchecked Sendable: this program is single-threaded.
final class StaticChainRoot: SafeObservable, @unchecked Sendable {
    static let shared = StaticChainRoot()
    @Observed var middle = Middle()
}

/// A subclass whose override of the chain's last link reads the stored value
/// and changes it: the key path is then no chain of `@Observed` properties.
final class DoublingLeaf: SafeObservable {
    @Observed var raw = 0
    var doubled: Int { raw * 2 }
}

do {
    // The last link of a chain forwards its change; replacing a link re-targets.
    let root = Root()
    let label = Label()
    var log: [String] = []
    root.safeObserve(\.middle.leaf.value, by: label, options: [.old, .new]) { _, _, change in
        log.append("\(change.oldValue!)->\(change.newValue!)")
    }
    root.middle.leaf.value = 1
    let oldLeaf = root.middle.leaf
    root.middle.leaf = Leaf()
    oldLeaf.value = 99
    root.middle.leaf.value += 5
    check(log == ["0->1", "1->0", "0->5"], "a chain delivers its leaf and re-targets (\(log))")

    // Replacing the first link re-reads the chain (from storage, in a chain of
    // stored links), including objects never observed before.
    let titled = TitledRoot()
    var titles: [String] = []
    titled.safeObserve(\.middle.leaf.title, by: label, options: [.old, .new]) { _, _, change in
        titles.append("\(change.oldValue!)->\(change.newValue!)")
    }
    let fresh = TitledMiddle()
    fresh.leaf.title = String(repeating: "long ", count: 8)
    titled.middle = fresh
    fresh.leaf.title = "short"
    titled.middle = TitledMiddle()
    fresh.leaf.title = "ignored"
    check(
        titles == [
            "untitled->" + String(repeating: "long ", count: 8), String(repeating: "long ", count: 8) + "->short",
            "short->untitled",
        ],
        "replacing a chain's first link re-targets it (\(titles))")

    // The same from a singleton root, whose storage the walk writes sentinels into.
    var fromSingleton: [Int] = []
    let singletonToken = StaticChainRoot.shared.safeObserve(\.middle.leaf.value, by: label) { _, _, change in
        fromSingleton.append(change.newValue!)
    }
    let replacement = Middle()
    replacement.leaf.value = 7
    StaticChainRoot.shared.middle = replacement
    replacement.leaf.value = 8
    singletonToken.invalidate()
    check(fromSingleton == [7, 8], "a chain rooted at a singleton re-targets (\(fromSingleton))")

    // Nested changes through a chain reach a later relation in order.
    var later: [Int] = []
    root.safeObserve(\.middle.leaf.value, by: Label()) { _, root, change in
        if change.newValue! < 8 { root.middle.leaf.value += 1 }
    }
    let lateLabel = Label()
    root.safeObserve(\.middle.leaf.value, by: lateLabel) { _, _, change in later.append(change.newValue!) }
    root.middle.leaf.value = 6
    check(later.last == root.middle.leaf.value, "the last delivered value is the current one (\(later))")
    withExtendedLifetime(lateLabel) {}

    // A computed end of a path is re-evaluated, not forwarded.
    let doubling = DoublingLeaf()
    var doubled: [Int] = []
    doubling.safeObserve(\.doubled, by: label) { _, _, change in doubled.append(change.newValue!) }
    doubling.raw = 3
    check(doubled == [6], "a computed property delivers its own value")
    withExtendedLifetime(label) {}
}

do {
    // KVO's shape: one relation per observation, ended by release or invalidate.
    let counter = Counter()
    var seen: [String] = []
    var first: KeyValueObservation? = counter.observe(\.count, options: [.new], isolation: nil) { _, change in
        seen.append("first \(change.newValue!)")
    }
    let second = counter.observe(\.count, options: [.new], isolation: nil) { _, change in
        seen.append("second \(change.newValue!)")
    }
    counter.count = 1
    first = nil
    counter.count = 2
    second.invalidate()
    counter.count = 3
    check(seen == ["first 1", "second 1", "second 2"], "KeyValueObservation ends on release and invalidate (\(seen))")
    check(SafeObservation.relations(of: counter).isEmpty && first == nil, "no observation relation is left")
}

/// Holds an observation that it drops from the observation's own handler.
final class OneShotScreen {
    var observation: KeyValueObservation?
    var seen: [Int] = []
}

do {
    // KVO code often stops observing from the handler once a condition holds.
    let counter = Counter()
    let screen = OneShotScreen()
    let note = "captured"
    screen.observation = counter.observe(\.count, options: [.new], isolation: nil) { [unowned screen] _, change in
        screen.observation = nil  // the last reference to the observation, and to this closure
        screen.seen.append(change.newValue! * 10 + note.count)  // its captures are still alive here
    }
    counter.count = 1
    counter.count = 2
    check(screen.seen == [18], "an observation released inside its own handler ends after it (\(screen.seen))")
    check(SafeObservation.relations(of: counter).isEmpty, "and leaves no relation")
}

// MARK: - Observation sees a SafeObservable model that also conforms to Observable

/// Across the module boundary, in every build mode the smoke runs in: the
/// conformance's witness is chosen here, in the client.
final class SeenCounter: SafeObservable, Observable {
    @Observed var count = 0
}

/// Counts a tracking's `onChange` calls (made on this thread, synchronously).
// @unchecked Sendable: only touched on the thread that runs the checks.
final class Firings: @unchecked Sendable {
    var count = 0
}

do {
    let counter = SeenCounter()
    let firings = Firings()
    withObservationTracking {
        _ = counter.count
    } onChange: {
        firings.count += 1
    }
    counter.count = 1
    check(firings.count == 1, "Observation sees a change of a SafeObservable model that also conforms to Observable")
    withObservationTracking {
        _ = counter.count
    } onChange: {
        firings.count += 1
    }
    counter.count = 1
    check(firings.count == 1, "an equal value is no change for Observation")
    var told: [Int] = []
    let listener = Label()
    counter.safeObserve(\.count, by: listener) { _, _, change in told.append(change.newValue!) }
    counter.count = 2
    check(told == [2], "safeObserve still delivers synchronously on a model Observation sees")
}

// MARK: - Notifications

extension NotificationName where Payload == Int {
    static let unread = NotificationName("unread")
}

do {
    let hub = NotificationHub()
    let deaths = Deaths()
    var label: Label? = Label(deaths: deaths)
    hub.observe(.unread, by: label!) { label, notification in label.text = "\(notification.payload)" }
    hub.post(.unread, payload: 3)
    check(label!.text == "3", "a typed post reaches its observer")
    var sender: Owner? = Owner()
    let filtered = Label()
    hub.observe(.unread, from: sender!, by: filtered) { label, notification in label.text = "\(notification.payload)" }
    sender = nil
    hub.post(.unread, payload: 4, from: Owner())
    check(filtered.text.isEmpty, "a dead sender's filter matches nothing")
    label = nil
    hub.post(.unread, payload: 5)
    check(deaths.count == 1, "a listener observing notifications dies when released")
}

// MARK: - Foundation's NotificationCenter, through the bridge

do {
    let center = NotificationCenter()
    let name = Notification.Name("ConsumerSmoke.changed")
    let deaths = Deaths()
    var label: Label? = Label(deaths: deaths)
    center.safeObserve(name, by: label!, isolation: nil) { label, notification in
        label.text = "\(notification.userInfo?["count"] as? Int ?? -1)"
    }
    center.post(name: name, object: nil, userInfo: ["count": 6])
    check(label!.text == "6", "a NotificationCenter post reaches a bridged observer")
    var sender: Owner? = Owner()
    let filtered = Label()
    center.safeObserve(name, object: sender!, by: filtered, isolation: nil) { label, _ in label.text = "matched" }
    sender = nil
    center.post(name: name, object: Owner())
    check(filtered.text.isEmpty, "a bridged filter on a dead sender matches nothing")
    label = nil
    center.post(name: name, object: nil)
    check(deaths.count == 1, "a bridged listener dies when released, and is not called after")
}

// MARK: - Isolation

/// A main-actor listener, not Sendable.
@MainActor
final class MainView {
    var values: [Int] = []
}

// @unchecked Sendable: changed by one task at a time.
final class SharedCounter: SafeObservable, @unchecked Sendable {
    @Observed var count = 0
}

do {
    // Registered from the main actor (this file's top level): delivered on it.
    // The program stays synchronous (top-level code with an `await` is one
    // asynchronous frame, whose temporaries LeakSanitizer reports at exit);
    // it runs the main run loop, which runs the main actor's jobs, to wait.
    let shared = SharedCounter()
    let view = MainView()
    shared.safeObserve(\.count, by: view) { view, _, change in view.values.append(change.newValue!) }
    shared.count = 1
    check(view.values == [1], "a change made on the main actor is delivered synchronously")
    Task.detached { shared.count = 2 }
    let deadline = Date().addingTimeInterval(4)
    while view.values.count < 2, Date() < deadline { RunLoop.main.run(until: Date().addingTimeInterval(0.001)) }
    check(view.values == [1, 2], "a change made elsewhere reaches a main-actor handler on the main actor")
}

do {
    // A change made on the main thread, in a task or not — here in a
    // main-queue block, outside any task, and in a main-actor task, both run
    // by the main run loop — counts as made on the main actor, and is
    // delivered synchronously (Threading.md). A test process cannot check
    // this: Swift Testing parks its main thread in `dispatchMain()`, and a
    // main-queue block then runs on a thread standing in for it, and hops.
    let shared = SharedCounter()
    let view = MainView()
    shared.safeObserve(\.count, by: view) { view, _, change in view.values.append(change.newValue!) }
    var ran: [String] = []
    DispatchQueue.main.async {
        shared.count = 1
        check(
            view.values.last == 1, "a change made in a main-queue block on the main thread is delivered synchronously")
        ran.append(Thread.isMainThread ? "block on the main thread" : "block elsewhere")
    }
    Task { @MainActor in
        shared.count = 2
        check(view.values.last == 2, "a change made in a main-actor task on the main thread is delivered synchronously")
        ran.append(Thread.isMainThread ? "task on the main thread" : "task elsewhere")
    }
    let deadline = Date().addingTimeInterval(4)
    while ran.count < 2, Date() < deadline { RunLoop.main.run(until: Date().addingTimeInterval(0.001)) }
    check(
        Set(ran) == ["block on the main thread", "task on the main thread"],
        "the main run loop ran the block and the task on the main thread")
}

if failures.isEmpty {
    print("consumer smoke: \(passed) passed, 0 failed")
} else {
    print("consumer smoke: \(passed) passed, \(failures.count) failed")
    exit(1)
}
