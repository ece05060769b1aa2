// An `@Observable` model dies while a change waits for its handler's busy
// actor: nothing is delivered, and the relation ends in the model's deinit,
// releasing the handler and its captures at once, whatever is queued (the
// `SafeObservable` counterpart ends in its sentinel's deinit the same way).

import Dispatch
import Observation
import Synchronization
import Testing

@testable import SafeObserve

@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class Dial: @unchecked Sendable {
    var level = 0
    @ObservationIgnored let lifetime: LifetimeCounter

    init(lifetime: LifetimeCounter) {
        self.lifetime = lifetime
        lifetime.didInit()
    }
    deinit { lifetime.didDeinit() }
}

/// An actor on an executor the test can hold, as a handler's isolation.
private actor DialHost {
    let executor = HoldableExecutor()
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    /// Registers from the actor: the handler is isolated to it.
    func observe(_ dial: Dial, by listener: Peer, _ captured: Captured, _ log: EventLog) {
        dial.safeObserve(\.level, by: listener) { _, _, change in
            _ = captured
            log.record(describe(change))
        }
    }

    func sync() {}
}

@Suite("An @Observable model dying while a change is queued")
struct ObservableModelDeathWhileQueuedTests {
    /// Where the handler runs, and how the test keeps it busy.
    enum Isolation: String, CaseIterable, Sendable {
        /// An actor on a custom executor, held (its jobs wait without a thread).
        case customExecutor
        /// An actor listener on a custom executor, held.
        case actorListener
        /// The main actor, its thread blocked for the moment.
        case mainActor
    }

    /// The model dies while its change waits for the busy actor: the
    /// relation ends in the model's deinit, its handler and captures are
    /// released at once (before anything asks about the relation), and the
    /// change is never delivered. With Observation's public tracking (Apple
    /// platforms), the queued job keeps the model's sentinel: the watch ends
    /// the relation within half a second.
    @Test(arguments: Isolation.allCases)
    func theModelDies_whileItsChangeWaitsForTheBusyActor_releasesTheHandlerAtOnce(
        isolation: Isolation
    ) async {
        let models = LifetimeCounter()
        let captures = LifetimeCounter()
        let log = EventLog()
        let listener = Peer()
        let host = DialHost()
        var dial: Dial? = Dial(lifetime: models)
        weak let weakDial = dial
        var token: ObservationToken?
        do {
            let captured = Captured(captures)
            switch isolation {
            case .customExecutor:
                await host.observe(dial!, by: listener, captured, log)
            case .actorListener:
                token = dial!.safeObserve(\.level, by: host) { _, _, change in
                    _ = captured
                    log.record(describe(change))
                }
            case .mainActor:
                token = await MainActor.run { [dial] in
                    dial!.safeObserve(\.level, by: listener) { _, _, change in
                        _ = captured
                        log.record(describe(change))
                    }
                }
            }
        }
        #expect(captures.liveCount == 1)

        // The handler's actor is busy: the change's delivery waits for it.
        let releaseMain = DispatchSemaphore(value: 0)
        if isolation == .mainActor {
            #expect(await holdMainActor(until: releaseMain), "the main actor never ran the blocking job")
        } else {
            host.executor.hold()
        }
        dial!.level = 1
        dial = nil

        #expect(weakDial == nil, "the relation kept the model alive")
        #expect(models.deinitCount == 1)
        // Checked before anything asks about the relation (asking ends it).
        if _ObservationTrackingLayer.reportsAfterTheStore {
            #expect(captures.deinitCount == 1, "\(isolation): handler kept after the model's death")
        } else {
            #expect(await eventually { captures.deinitCount == 1 }, "\(isolation): handler kept")
        }

        releaseMain.signal()
        host.executor.release()
        await host.sync()
        await MainActor.run {}
        #expect(log.entries.isEmpty, "\(isolation): delivered after the model died: \(log.entries)")
        #expect(token?.isActive != true)
        #expect(captures.liveCount == 0)
    }
}
