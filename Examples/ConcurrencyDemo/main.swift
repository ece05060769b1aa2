// ConcurrencyDemo — a main-actor view model fed by a background actor: a
// handler isolated to the main actor, coalesced changes, an actor listener,
// and an asynchronous sequence of values. No assumeIsolated, no @unchecked
// Sendable on the listeners, and nothing to remove.
//
//   swift run ConcurrencyDemo

import SafeObserve

/// The model, changed by one actor at a time.
// @unchecked Sendable: `progress` is written only by `Downloader`, one write at a time.
final class Download: SafeObservable, @unchecked Sendable {
    @Observed var progress = 0
}

/// Does the work off the main actor.
actor Downloader {
    func run(_ download: Download, steps: Int = 5, pause: Duration = .milliseconds(20)) async {
        for step in 1...steps {
            download.progress = step * 100 / steps
            if pause > .zero { try? await Task.sleep(for: pause) }
        }
    }
}

/// What a view would bind to: main-actor state, not Sendable.
@MainActor
final class DownloadViewModel {
    private(set) var text = "0%"
    private(set) var updates = 0
    private var token: ObservationToken?

    /// Registered from the main actor: the handler is main-actor isolated,
    /// so it touches `text` directly, whichever thread changes `progress`.
    func follow(_ download: Download, options: ObservationOptions = [.initial, .new]) {
        token = download.safeObserve(\.progress, by: self, options: options) { model, _, change in
            model.text = "\(change.newValue!)%"
            model.updates += 1
        }
    }

    /// The same, awaited: the current value, then each new one.
    func track(_ download: Download) async {
        for await progress in download.values(\.progress) {
            text = "\(progress)%"
            updates += 1
            if progress == 100 { break }  // leaving the loop ends the relation
        }
    }

    func stop() { token?.invalidate() }
}

/// An actor listening to the model: its handler gets it as an isolated parameter.
actor ProgressLog {
    private(set) var entries: [Int] = []

    func watch(_ download: Download) {
        download.safeObserve(\.progress, by: self) { log, _, change in
            log.entries.append(change.newValue!)
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
    print("1. A main-actor handler, fed by a background actor")
    let download = Download()
    let viewModel = DownloadViewModel()
    viewModel.follow(download)
    await Downloader().run(download)
    await settle()
    print("   the view model shows \(viewModel.text) after \(viewModel.updates) updates, each on the main actor")
    download.progress = 0  // made on the main actor: delivered before the next line
    print("   a change made on the main actor is delivered at once: \(viewModel.text)")
    viewModel.stop()

    print("2. .coalesced: changes waiting for the main actor merge into one")
    let busy = Download()
    let busyViewModel = DownloadViewModel()
    busyViewModel.follow(busy, options: [.new, .coalesced])
    await Downloader().run(busy, steps: 1_000, pause: .zero)
    await settle()
    print("   1000 changes, \(busyViewModel.updates) update(s), showing \(busyViewModel.text)")

    print("3. An actor as listener")
    let log = ProgressLog()
    await log.watch(download)
    await Downloader().run(download, steps: 4, pause: .zero)
    await settle()
    print("   the log's actor recorded \(await log.entries)")

    print("4. values(\\.progress): for await on the main actor")
    let awaited = Download()
    let awaitingViewModel = DownloadViewModel()
    async let tracking: Void = awaitingViewModel.track(awaited)
    await Task.yield()
    await Downloader().run(awaited)
    await tracking
    print("   finished at \(awaitingViewModel.text); relations left: \(SafeObservation.relations(of: awaited).count)")

    print("5. Nothing outlives its owner")
    var model: Download? = Download()
    weak var weakModel: Download?
    weakModel = model
    let dying = DownloadViewModel()
    dying.follow(model!)
    model = nil
    print(
        "   the model died (\(weakModel == nil)), and its relations with it: \(SafeObservation.relations(observedBy: dying).count) left"
    )
}

await demo()
