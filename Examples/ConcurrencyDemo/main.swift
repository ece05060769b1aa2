// ConcurrencyDemo — a main-actor view model fed by a background actor,
// through an asynchronous sequence of values: no assumeIsolated, no
// @unchecked Sendable, and nothing to remove.
//
//   swift run ConcurrencyDemo

import SafeObserve

/// The model, mutated by one actor at a time.
// @unchecked Sendable: `progress` is written only by `Downloader`, one write at a time.
final class Download: SafeObservable, @unchecked Sendable {
    @Observed var progress = 0
}

/// Does the work off the main actor.
actor Downloader {
    func run(_ download: Download) async {
        for step in 1...5 {
            download.progress = step * 20
            try? await Task.sleep(for: .milliseconds(20))
        }
    }
}

/// What a view would bind to: main-actor state, updated by `for await`.
@MainActor
final class DownloadViewModel {
    private(set) var text = "0%"
    private(set) var updates = 0

    /// Follows `download` until it reaches 100% (or dies).
    func follow(_ download: Download) async {
        for await progress in download.values(\.progress) {
            text = "\(progress)%"  // main-actor state, touched on the main actor
            updates += 1
            print("  view model shows \(text)")
            if progress == 100 { break }  // leaving the loop ends the relation
        }
    }
}

@MainActor
func demo() async {
    let download = Download()
    let viewModel = DownloadViewModel()
    print("1. values(\\.progress): the current value, then each new one, on the main actor")
    async let following: Void = viewModel.follow(download)
    await Downloader().run(download)
    await following
    print("   finished at \(viewModel.text) after \(viewModel.updates) updates (a slow consumer sees the latest)")
    print("   relations left: \(SafeObservation.relations(of: download).count)")

    print("2. The sequence ends by itself when the object dies")
    var model: Download? = Download()
    let sequence = model!.values(\.progress)
    let task = Task { @MainActor in
        var seen = 0
        for await _ in sequence { seen += 1 }
        return seen
    }
    await Task.yield()
    model = nil
    print("   ended after \(await task.value) value(s), without keeping the object alive")
}

await demo()
