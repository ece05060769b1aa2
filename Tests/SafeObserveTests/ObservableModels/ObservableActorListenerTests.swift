// An actor observing an `@Observable` model, its handler isolated to it
// (issue 32): `.initial` before the call returns on the actor, first from
// elsewhere; changes on the actor; the actor's death ends the relation.

import Observation
import Synchronization
import Testing

@testable import SafeObserve

@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class Meter: @unchecked Sendable {
    var level = 0
}

/// What an actor's handler was told, readable from anywhere.
private final class Told: Sendable {
    private let changes = _Mutex<[ObservedChange<Int>]>([])
    func append(_ change: ObservedChange<Int>) { changes.withLock { $0.append(change) } }
    var all: [ObservedChange<Int>] { changes.withLock { $0 } }
}

private actor Recorder {
    let told = Told()
    let lifetime: LifetimeCounter?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }
    deinit { lifetime?.didDeinit() }

    /// Observes from the actor: `.initial` is here before this returns.
    func watch(_ meter: Meter) -> Int {
        meter.safeObserve(\.level, by: self, options: [.initial, .old, .new]) { recorder, _, change in
            recorder.told.append(change)
        }
        return told.all.count
    }
}

@Suite("An actor observing @Observable models")
struct ObservableActorListenerTests {
    /// On the actor: `.initial` before the call returns, then each change
    /// on the actor, chained.
    @Test func registeredOnTheActor_isToldInitialAtOnce_thenChangesOnIt() async {
        let meter = Meter()
        let recorder = Recorder()
        #expect(await recorder.watch(meter) == 1, ".initial was not delivered before the call returned")
        meter.level = 1
        #expect(await eventually { recorder.told.all.last?.newValue == 1 })
        meter.level = 2
        #expect(await eventually { recorder.told.all.last?.newValue == 2 })
        let changes = recorder.told.all
        #expect(changes.first?.isInitial == true)
        #expect(changes.dropFirst().map(describe) == ["0->1", "1->2"])
    }

    /// From elsewhere: `.initial` comes first, in a job on the actor, before
    /// any change.
    @Test func registeredFromElsewhere_isToldInitialFirst() async {
        let meter = Meter()
        let recorder = Recorder()
        meter.safeObserve(\.level, by: recorder, options: [.initial, .old, .new]) { recorder, _, change in
            recorder.assertIsolated()
            recorder.told.append(change)
        }
        meter.level = 5
        #expect(await eventually { recorder.told.all.last?.newValue == 5 })
        let changes = recorder.told.all
        #expect(changes.first?.isInitial == true, "\(changes.map(describe))")
        #expect(changes.filter(\.isInitial).count == 1)
    }

    /// The actor dies: never kept alive, its relation ends.
    @Test func anActorThatDies_wasNeverKeptAlive_andItsRelationEnds() async {
        let meter = Meter()
        let lifetime = LifetimeCounter()
        var recorder: Recorder? = Recorder(lifetime: lifetime)
        _ = await recorder!.watch(meter)
        #expect(SafeObservation.relations(of: meter).count == 1)
        recorder = nil
        #expect(lifetime.liveCount == 0, "the relation kept the actor alive")
        meter.level = 1
        #expect(await eventually { SafeObservation.relations(of: meter).isEmpty })
    }
}
