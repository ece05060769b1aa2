import Observation
import SafeObserve
import Synchronization
import Testing

enum ObservingObservableModels {
    // example: ObservingObservableModels.md 1
    @Observable final class Store {
        var count = 0
    }

    @MainActor final class ViewModel {
        var text = ""

        func show(_ store: Store) {
            store.safeObserve(\.count, by: self, options: [.initial, .old, .new]) { model, _, change in
                model.text = "\(change.oldValue ?? 0) → \(change.newValue!)"
            }
        }
    }
    // end example

    @Test("ObservingObservableModels.md: a main-actor view model of an @Observable store")
    @MainActor
    static func viewModel() async {
        let store = Store()
        let viewModel = ViewModel()
        viewModel.show(store)
        #expect(viewModel.text == "0 → 0")
        store.count = 3
        #expect(viewModel.text == "0 → 0", "delivered inside the mutating call")
        #expect(await eventually { viewModel.text == "0 → 3" })
    }

    @Test("ObservingObservableModels.md: unobserving")
    @MainActor
    static func unobserving() {
        let store = Store()
        let viewModel = ViewModel()
        viewModel.show(store)
        // example: ObservingObservableModels.md 3
        store.safeUnobserve(\.count, by: viewModel)
        #expect(SafeObservation.relations(of: store).isEmpty)
        // end example
    }

    @MainActor final class Renderer {
        private(set) var rendered: [Int] = []
        func render(_ count: Int) { rendered.append(count) }

        func show(_ store: Store) {
            // example: ObservingObservableModels.md 5
            store.safeObserve(\.count, by: self, options: [.initial, .new]) { model, _, change in
                model.render(change.newValue!)
            }
            // end example
        }
    }

    @Test("ObservingObservableModels.md: migrating a re-registration loop")
    @MainActor
    static func migratingALoop() async {
        let store = Store()
        let renderer = Renderer()
        renderer.show(store)
        store.count = 1
        #expect(await eventually { renderer.rendered == [0, 1] })
    }

    @MainActor final class Lister {
        private(set) var rendered: [Int] = []
        private(set) var task: Task<Void, Never>?
        func render(_ count: Int) { rendered.append(count) }

        // example: ObservingObservableModels.md 6
        func show(_ store: Store) {
            let counts = store.values(\.count)  // holds the store weakly
            task = Task {
                for await count in counts {
                    render(count)
                }
                // The store died: the loop ended.
            }
        }
        // end example
    }

    @Test("ObservingObservableModels.md: awaiting values until the store dies")
    @MainActor
    static func awaitingValues() async {
        var store: Store? = Store()
        let lister = Lister()
        lister.show(store!)
        #expect(await eventually { lister.rendered == [0] })
        store!.count = 1
        #expect(await eventually { lister.rendered == [0, 1] })
        store = nil
        await lister.task?.value
        #expect(lister.rendered == [0, 1])
    }

    @Test("ObservingObservableModels.md: a SafeObservable model that Observation sees")
    static func seenByObservation() {
        // example: ObservingObservableModels.md 7
        final class Counter: SafeObservable, Observable {
            @Observed var count = 0
        }

        let counter = Counter()
        withObservationTracking {
            _ = counter.count
        } onChange: {
            print("count will change")
        }
        counter.count = 1  // prints "count will change"
        // end example
        let fired = Fired()
        withObservationTracking {
            _ = counter.count
        } onChange: {
            fired.fire()
        }
        counter.count = 2
        #expect(fired.count == 1)
    }
}

extension ObservingObservableModels {
    @Observable final class Inbox {
        var unread = 0
        var title = "Inbox"
    }

    @MainActor final class InboxBadge {
        private(set) var reloads = 0
        func reload() { reloads += 1 }
    }

    @Test("ObservingObservableModels.md: a controller's action over several key paths")
    @MainActor
    static func controllerAction() async {
        let inbox = Inbox()
        let badge = InboxBadge()
        let controller = ObservationController(observer: badge)
        // example: ObservingObservableModels.md 8
        controller.observe(inbox, keyPaths: \.unread, \.title, action: InboxBadge.reload)
        // end example
        inbox.unread = 1
        #expect(await eventually { badge.reloads == 1 })
        inbox.title = "Mail"
        #expect(await eventually { badge.reloads == 2 })
    }
}

extension ObservingObservableModels {
    // @unchecked Sendable: the test changes it on one thread at a time.
    @Observable final class Meter: @unchecked Sendable {
        var level = 0
    }

    final class Recorder: Sendable {
        private let levels = Mutex<[Int]>([])
        func append(_ level: Int) { levels.withLock { $0.append(level) } }
        var recorded: [Int] { levels.withLock { $0 } }
    }

    @Test("ObservingObservableModels.md: a Sendable model observed from nonisolated code")
    static func fromNonisolatedCode() async {
        let meter = Meter()
        let recorder = Recorder()
        NonisolatedWatch.watch(meter, for: recorder)
        meter.level = 3
        #expect(await eventually { recorder.recorded == [3] })
    }
}

private enum NonisolatedWatch {
    typealias Meter = ObservingObservableModels.Meter
    typealias Recorder = ObservingObservableModels.Recorder

    // example: ObservingObservableModels.md 2
    static func watch(_ meter: Meter, for recorder: Recorder) {  // nonisolated
        // Meter and Recorder are Sendable; the handler runs on a global executor.
        meter.safeObserve(\.level, by: recorder, isolation: nil) { recorder, _, change in
            recorder.append(change.newValue!)
        }
    }
    // end example
}

/// Counts the calls of a tracking's `onChange`.
// @unchecked Sendable: `onChange` runs on the mutating thread, which is the test's.
private final class Fired: @unchecked Sendable {
    private(set) var count = 0
    func fire() { count += 1 }
}
