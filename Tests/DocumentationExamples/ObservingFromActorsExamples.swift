import SafeObserve
import Testing

// example: ObservingFromActorsAndAsyncCode.md 1
final class Download: SafeObservable, @unchecked Sendable {
    // @unchecked Sendable: only `Downloader` writes `progress`, one write at a time.
    @Observed var progress = 0
}

actor Downloader {
    func run(_ download: Download) async {
        for step in 1...5 {
            download.progress = step * 20  // off the main actor
            try? await Task.sleep(for: .milliseconds(20))
        }
    }
}
// end example

// example: ObservingFromActorsAndAsyncCode.md 2
@MainActor
final class DownloadViewModel {
    private(set) var text = "0%"

    func follow(_ download: Download) {
        download.safeObserve(\.progress, by: self, options: [.initial, .new]) { model, _, change in
            model.text = "\(change.newValue!)%"  // on the main actor, in order
        }
    }
}
// end example

extension DownloadViewModel {
    func followCoalesced(_ download: Download) {
        // example: ObservingFromActorsAndAsyncCode.md 3
        download.safeObserve(\.progress, by: self, options: [.new, .coalesced]) { model, _, change in
            model.text = "\(change.newValue!)%"
        }
        // end example
    }
}

@Test("ObservingFromActorsAndAsyncCode.md: a main-actor view model fed by a background actor")
@MainActor
func actorsArticleViewModel() async {
    let download = Download()
    let model = DownloadViewModel()
    model.follow(download)
    #expect(model.text == "0%")
    await Downloader().run(download)
    #expect(await eventually { model.text == "100%" })
}

@Test("ObservingFromActorsAndAsyncCode.md: drawing less often")
@MainActor
func actorsArticleCoalesced() async {
    let download = Download()
    let model = DownloadViewModel()
    model.followCoalesced(download)
    await Downloader().run(download)
    #expect(await eventually { model.text == "100%" })
}

// example: ObservingFromActorsAndAsyncCode.md 4
actor ProgressLog {
    private(set) var entries: [Int] = []

    func watch(_ download: Download) {
        download.safeObserve(\.progress, by: self) { log, _, change in
            log.entries.append(change.newValue!)
        }
    }
}
// end example

@Test("ObservingFromActorsAndAsyncCode.md: an actor as listener")
func actorsArticleActorListener() async {
    let download = Download()
    let log = ProgressLog()
    await log.watch(download)
    await Downloader().run(download)
    var entries: [Int] = []
    for _ in 0..<2_500 where entries.count < 5 {
        entries = await log.entries
        try? await Task.sleep(for: .milliseconds(2))
    }
    #expect(entries == [20, 40, 60, 80, 100])
}

@Test("ObservingFromActorsAndAsyncCode.md: awaiting values; leaving the loop ends the relation")
@MainActor
func actorsArticleAwaitingValues() async {
    let download = Download()
    let model = DownloadViewModel()
    let tracking = Task { await model.track(download) }
    #expect(await eventually { model.text == "0%" })
    await Downloader().run(download)
    #expect(await finishes(tracking), "the loop breaks at 100")
    #expect(model.text == "100%")
    #expect(await eventually { SafeObservation.relations(of: download).isEmpty })
}

// example: ObservingFromActorsAndAsyncCode.md 5
extension DownloadViewModel {
    func track(_ download: Download) async {
        for await progress in download.values(\.progress) {
            text = "\(progress)%"  // on the main actor
            if progress == 100 { break }  // leaving the loop ends the relation
        }
    }
}
// end example
