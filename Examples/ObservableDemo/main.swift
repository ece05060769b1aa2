// ObservableDemo — an existing `@Observable` store, unchanged, observed with
// SafeObserve's lifetimes: a main-actor view model fed by a background actor,
// old and new values, a chain through a replaced link, an asynchronous
// sequence that finishes when the store dies, and nothing to remove; then
// the other way round: a SafeObserve model that Observation's `Observations`
// (and so SwiftUI) sees, while `safeObserve` still delivers synchronously.
//
//   swift run ObservableDemo

import Observation
import SafeObserve

/// The store as a codebase already has it: Swift's Observation, no
/// SafeObserve in it.
@Observable
// @unchecked Sendable: changed by `Syncer` only, one change at a time.
final class Store: @unchecked Sendable {
    var unread = 0
    var account = Account(name: "ada")
}

@Observable
// @unchecked Sendable: changed by one actor at a time.
final class Account: @unchecked Sendable {
    var name: String
    init(name: String) { self.name = name }
}

/// A model written for SafeObserve that also conforms to `Observable`:
/// Observation (`withObservationTracking`, `Observations`, SwiftUI) sees its
/// `@Observed` properties too.
final class Player: SafeObservable, Observable {
    @Observed var score = 0
}

/// Changes the store off the main actor.
actor Syncer {
    func sync(_ store: Store, count: Int) async {
        for _ in 0..<count {
            store.unread += 1
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}

/// What a view would bind to: main-actor state, not Sendable. As a
/// `SafeObserver`, its relations end in its `deinit`.
@MainActor
final class InboxViewModel: SafeObserver {
    let observerLifetime = ObserverLifetime()
    private(set) var badge = ""
    private(set) var owner = ""
    private(set) var deliveries = 0

    /// Registered from the main actor: handlers run there, after the
    /// mutating call returned, whichever thread made the change.
    func show(_ store: Store) {
        store.safeObserve(\.unread, by: self, options: [.initial, .old, .new]) { model, _, change in
            model.badge = "\(change.oldValue ?? 0) → \(change.newValue!)"
            model.deliveries += 1
        }
        store.safeObserve(\.account.name, by: self, options: [.initial, .new]) { model, _, change in
            model.owner = change.newValue!
        }
    }
}

/// Lets the main actor run what was queued for it.
@MainActor
func settle() async {
    for _ in 0..<3 { try? await Task.sleep(for: .milliseconds(20)) }
}

@MainActor
func demo() async {
    print("1. A main-actor view model of an @Observable store changed by a background actor")
    let store = Store()
    let viewModel = InboxViewModel()
    viewModel.show(store)
    print("   before: badge \(viewModel.badge), owner \(viewModel.owner)")
    await Syncer().sync(store, count: 5)
    await settle()
    print(
        "   after 5 changes: badge \(viewModel.badge), in \(viewModel.deliveries - 1) deliveries, each on the main actor"
    )

    print("2. A chain follows a replaced link")
    store.account = Account(name: "grace")
    await settle()
    print("   owner \(viewModel.owner)")

    print("3. values(\\.unread): the current value, then each new one, until the store dies")
    var temporary: Store? = Store()
    let values = temporary!.values(\.unread)  // holds the store weakly
    let reader = Task {
        var seen: [Int] = []
        for await value in values { seen.append(value) }
        return seen
    }
    await settle()
    temporary!.unread = 1
    await settle()
    temporary = nil
    print("   the store died, the loop ended having seen \(await reader.value)")

    print("4. Nothing outlives its owner")
    var dying: InboxViewModel? = InboxViewModel()
    dying!.show(store)
    print("   relations on the store: \(SafeObservation.relations(of: store).count)")
    dying = nil
    print("   after the view model died: \(SafeObservation.relations(of: store).count)")

    print("5. A SafeObservable model seen by Observation: Observations and safeObserve side by side")
    let player = Player()
    var told: [String] = []
    player.safeObserve(\.score, by: viewModel, options: [.old, .new]) { _, _, change in
        told.append("\(change.oldValue!)→\(change.newValue!)")  // synchronous, after the store
    }
    let scores = Observations { player.score }
    var iterator = scores.makeAsyncIterator()
    var seen = [await iterator.next(isolation: MainActor.shared)!]
    for score in [10, 20] {
        player.score = score
        seen.append(await iterator.next(isolation: MainActor.shared)!)
    }
    print("   Observations saw \(seen); safeObserve was told \(told)")
}

await demo()
